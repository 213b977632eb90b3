// persistent: a collective checked and planned once and started many times on the same
// buffers, as MPI_Allreduce_init and MPI_Start.
#pragma once

#include <memory>
#include <utility>

#include "mimatrix/core/error.hpp"
#include "mimatrix/detail/engine_core.hpp"
#include "mimatrix/request.hpp"

namespace mimatrix {

/// Made by `collectives::allreduce_init` or a typed collective's `prepare`. Each start()
/// is a new call with its own sequence number, every rank starting it where it would
/// start the plain call; it skips the argument checks, the plan lookup and the choice of
/// plan that a fresh call pays. The buffers must stay valid, and the collectives object
/// that made it alive, while it is used.
///
/// @par Thread Safety
/// As its communicator: one thread at a time.
class persistent {
 public:
  persistent() = default;
  persistent(detail::engine_core& engine, std::shared_ptr<const detail::prepared_call> call)
      : engine_(&engine), call_(std::move(call)) {}

  /// Starts the call once more (MPI_Start).
  [[nodiscard]] request start() {
    if (!engine_) throw error(errc::invalid_argument, "persistent::start on a default-made persistent call");
    return engine_->start(*call_);
  }
  /// Starts it and waits.
  void operator()() { start().wait(); }

  bool valid() const { return engine_ != nullptr; }

 private:
  detail::engine_core* engine_ = nullptr;
  std::shared_ptr<const detail::prepared_call> call_;
};

}  // namespace mimatrix
