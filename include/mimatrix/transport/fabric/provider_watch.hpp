// A watchdog for provider calls that never return. libfabric 1.17's shm spins on a lock in
// the receiver's shared region, and a peer killed or stopped inside the provider keeps
// that lock for ever: a rank that then sends to it, or reads its own queue, never comes
// back, and no deadline of the call can fire. Nothing bounds a provider call from outside
// or unwinds the thread inside it, so a thread of the endpoint's own notices a call that
// outlasts every deadline and acts (the endpoint ends the process with an error naming
// the peer, as PyTorch's watchdog ends a process whose NCCL call hangs).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/bootstrap/detail/process_mark.hpp"

namespace mimatrix::transport::detail::fabric {

/// @par Thread Safety
/// call() and allow() from any thread; the watch counts one call at a time (the engine's
/// lock keeps provider calls to one thread).
class provider_watch {
 public:
  /// Told, from the watch's thread, which call (to or from which peer; -1: none) has been
  /// inside how long; once a call.
  using on_stuck = std::function<void(const char* call, int peer, std::chrono::milliseconds inside)>;

  /// `tick`: how often the watch looks. `limit`: how long a call may take until allow().
  provider_watch(std::chrono::milliseconds tick, std::chrono::milliseconds limit, on_stuck act)
      : tick_(std::max(tick, std::chrono::milliseconds(1))), limit_ms_(limit.count()), act_(std::move(act)) {
    thread_ = std::thread([this] { run(); });
  }
  provider_watch(const provider_watch&) = delete;
  provider_watch& operator=(const provider_watch&) = delete;
  ~provider_watch() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  /// Runs `f` (one provider call, named `what`, to or from `peer`; -1: none) under the watch.
  template <class F>
  decltype(auto) call(const char* what, int peer, F&& f) {
    what_.store(what, std::memory_order_relaxed);
    peer_.store(peer, std::memory_order_relaxed);
    calls_.fetch_add(1, std::memory_order_release);  // odd: inside
    struct leave {
      std::atomic<std::uint64_t>& calls;
      ~leave() { calls.fetch_add(1, std::memory_order_release); }
    } on_return{calls_};
    return std::forward<F>(f)();
  }

  /// Sets how long a provider call may take.
  void allow(std::chrono::milliseconds limit) { limit_ms_.store(limit.count(), std::memory_order_relaxed); }
  /// A collective with this deadline starts: its provider calls may take as long and a
  /// grace, never less than the floor (a loaded host may deschedule a lock's holder).
  void allow_call(std::chrono::milliseconds deadline) { allow(std::max(deadline + grace, floor)); }

  static constexpr std::chrono::milliseconds grace{500}, floor{2000};
  /// How the endpoint ends a process whose provider call never returns: EX_TEMPFAIL,
  /// the job may be started again.
  static constexpr int exit_code = 75;

  std::chrono::milliseconds limit() const { return std::chrono::milliseconds(limit_ms_.load(std::memory_order_relaxed)); }
  /// Whether a call is inside now.
  bool inside() const { return calls_.load(std::memory_order_acquire) % 2 == 1; }

 private:
  /// Counts the ticks one call stays inside, not the time: a process stopped and resumed
  /// (a debugger, SIGSTOP) would otherwise find every call in flight late.
  void run() {
    std::uint64_t seen = 0;
    std::int64_t ticks = 0;
    bool told = false;
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, tick_, [&] { return stop_; })) {
      const std::uint64_t now = calls_.load(std::memory_order_acquire);
      if (now % 2 == 0 || now != seen) {
        seen = now;
        ticks = 0;
        told = false;
        continue;
      }
      const auto inside = tick_ * ++ticks;
      if (told || inside.count() <= limit_ms_.load(std::memory_order_relaxed)) continue;
      told = true;
      lock.unlock();
      act_(what_.load(std::memory_order_relaxed), peer_.load(std::memory_order_relaxed), inside);
      lock.lock();
    }
  }

  const std::chrono::milliseconds tick_;
  std::atomic<std::int64_t> limit_ms_;
  on_stuck act_;
  std::atomic<std::uint64_t> calls_{0};  // calls entered plus calls returned
  std::atomic<const char*> what_{""};
  std::atomic<int> peer_{-1};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

/// The peers on this host that may keep a provider's lock for ever: the stopped ones, as
/// "rank 2 (pid 42) is stopped", else the ended ones (killed, or failed and exited: this
/// side cannot tell which), as "rank 3 (pid 43) has ended"; "" if every one runs.
inline std::string lock_holders(const std::vector<std::pair<int, bootstrap::detail::process_mark>>& peers) {
  using status = bootstrap::detail::process_mark::status;
  std::string stopped, ended;
  for (const auto& [peer, mark] : peers) {
    const status s = mark.state();
    if (s == status::running) continue;
    std::string& list = s == status::stopped ? stopped : ended;
    list += (list.empty() ? "rank " : ", rank ") + std::to_string(peer) + " (pid " + std::to_string(mark.pid) +
            (s == status::stopped ? ") is stopped" : ") has ended");
  }
  return stopped.empty() ? ended : stopped;
}

/// The error a stuck provider call prints.
inline std::string stuck_report(int rank, const std::string& provider, const char* call, int peer,
                                std::chrono::milliseconds inside, const std::string& holders, bool exits) {
  return "mimatrix ERROR rank " + std::to_string(rank) + ": the " + provider + " provider has not returned from " +
         call + (peer >= 0 ? " (peer rank " + std::to_string(peer) + ")" : std::string()) + " for " +
         std::to_string(inside.count()) + " ms; " +
         (holders.empty() ? "no peer on this host is stopped or gone (a remote peer or the provider itself holds it)"
                          : "on this host " + holders +
                                ": a peer stopped or killed inside the provider keeps a lock that this rank waits on") +
         (exits ? "; no provider call can be left, so this process ends (exit code " +
                      std::to_string(provider_watch::exit_code) + "; MIMATRIX_STUCK_PROVIDER=wait waits instead)\n"
                : "; waiting on (MIMATRIX_STUCK_PROVIDER=wait)\n");
}

/// Prints the error on standard error and, when `exits`, ends the process with
/// provider_watch::exit_code: nothing else ends a provider call that never returns.
inline void report_stuck(int rank, const std::string& provider, const char* call, int peer,
                         std::chrono::milliseconds inside,
                         const std::vector<std::pair<int, bootstrap::detail::process_mark>>& peers,
                         bool exits) noexcept {
  try {
    const std::string line = stuck_report(rank, provider, call, peer, inside, lock_holders(peers), exits);
    (void)!::write(STDERR_FILENO, line.data(), line.size());  // unbuffered: out before anything else can block
  } catch (...) {
    // Out of memory composing the line: end as promised, unexplained.
  }
  if (!exits) return;
  std::fflush(nullptr);  // what the process printed before, as exit() would
  std::_Exit(provider_watch::exit_code);
}

}  // namespace mimatrix::transport::detail::fabric
