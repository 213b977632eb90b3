// How a rank's progress engine waits on the provider, and what its progress thread does
// between calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <utility>

#include "mimatrix/transport/progress.hpp"

namespace mimatrix::transport::detail::fabric {

/// How a rank waits on the provider: spins while a peer is likely microseconds away,
/// then gives the core away (ranks often outnumber cores in tests). Idle, the progress
/// thread runs `when_idle` (the endpoint's progress: a peer's abort reaches async_error).
class port final : public progress_port {
 public:
  explicit port(std::function<void()> when_idle) : when_idle_(std::move(when_idle)) {}
  void idle() override { when_idle_(); }
  void pause(std::uint64_t, int idle_rounds) override {
    if (idle_rounds <= 256) return;
    if (idle_rounds < 20000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

 private:
  std::function<void()> when_idle_;
};

}  // namespace mimatrix::transport::detail::fabric
