// A rooted call's operation that takes its root and count back out of the history later calls carry
// (signature::history) when it fails on this rank: its ranks were told of the failure,
// and on a provider that keeps its endpoint after a mismatch (shm) the next call must run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "mimatrix/core/operation.hpp"
#include "mimatrix/detail/communicator_state.hpp"

namespace mimatrix::detail {

class forgets_root_on_failure final : public operation {
 public:
  forgets_root_on_failure(std::unique_ptr<operation> inner, communicator_state& comm, std::uint64_t sequence)
      : inner_(std::move(inner)), comm_(comm), alive_(comm.liveness()), sequence_(sequence) {}

  bool test(std::error_code& ec) override {
    const bool done = inner_->test(ec);
    if (done && ec) forget();
    return done;
  }
  void wait(std::error_code& ec) override {
    inner_->wait(ec);
    if (ec) forget();
  }
  const std::string& message() const override { return inner_->message(); }
  int last_peer() const override { return inner_->last_peer(); }

 private:
  void forget() {
    if (!alive_.expired()) comm_.forget_root(sequence_);
  }

  std::unique_ptr<operation> inner_;
  communicator_state& comm_;
  std::weak_ptr<const void> alive_;  // comm_'s
  std::uint64_t sequence_;
};

}  // namespace mimatrix::detail
