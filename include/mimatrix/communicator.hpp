// communicator: a group of ranks bound to one transport endpoint, with the settings
// and the call sequence numbers that its collectives share.
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>

#include "mimatrix/core/options.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix {

/// @par Thread Safety
/// Used by one thread at a time. Every rank must call the collectives of a
/// communicator in the same order, as with MPI and NCCL.
template <transport::backend Transport>
class communicator {
 public:
  /// Builds the transport endpoint from `args` (for inproc: the world and the rank).
  template <class... Args>
    requires std::constructible_from<Transport, Args...>
  explicit communicator(Args&&... args)
      : transport_(std::forward<Args>(args)...), options_(options::from_environment()) {}

  int rank() const { return transport_.rank(); }
  int size() const { return transport_.size(); }

  Transport& transport() { return transport_; }
  const Transport& transport() const { return transport_; }
  const options& settings() const { return options_; }
  void set_timeout(std::chrono::milliseconds timeout) { options_.timeout = timeout; }

  /// The sequence number of the next call; every rank numbers its calls alike.
  std::uint64_t next_sequence() { return sequence_++; }

 private:
  Transport transport_;
  options options_;
  std::uint64_t sequence_ = 0;
};

}  // namespace mimatrix
