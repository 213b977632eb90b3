// MIMATRIX_FLIGHT_RECORD_SIGNAL (default SIGUSR1): a signal that dumps every flight record
// of the process. The handler only raises an atomic flag and posts a semaphore (both
// async-signal-safe); a watcher thread of the process, blocked on that semaphore, writes
// the dumps. A rank stuck in wait() under caller progress runs no other mimatrix code
// until its deadline, so the dump cannot wait for its next call.
#pragma once

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <semaphore.h>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "mimatrix/core/error.hpp"

namespace mimatrix::detail {

/// MIMATRIX_FLIGHT_RECORD_SIGNAL read strictly: "SIGUSR1", "USR1", "SIGUSR2", "USR2", a
/// number in [1, SIGRTMAX], or "0"/"none" (no signal). Throws `invalid_argument` naming the
/// variable otherwise.
inline int flight_signal_from_environment() {
  const char* v = std::getenv("MIMATRIX_FLIGHT_RECORD_SIGNAL");
  if (!v || !*v) return SIGUSR1;
  const std::string s(v);
  if (s == "SIGUSR1" || s == "USR1") return SIGUSR1;
  if (s == "SIGUSR2" || s == "USR2") return SIGUSR2;
  if (s == "none") return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end == '\0' && n >= 0 && n <= SIGRTMAX && n != SIGKILL && n != SIGSTOP) return int(n);
  throw error(errc::invalid_argument, "MIMATRIX_FLIGHT_RECORD_SIGNAL must be SIGUSR1, SIGUSR2, a signal number or "
                                      "'none', got '" + s + "'");
}

/// The process's dumpers: each communicator's flight record registers one while it lives.
/// @par Thread Safety
/// Every member from any thread but the signal handler, which only calls raise_flag().
class flight_signal {
 public:
  using dumper = std::function<void()>;

  static flight_signal& process() {
    static flight_signal* one = new flight_signal;  // never destroyed: the watcher may outlive main
    return *one;
  }

  /// Registers `dump` under `id` and, the first time in this process, installs the handler
  /// of `signal` (unless the program handles that signal itself: its handler stays).
  void add(const void* id, dumper dump, int signal) {
    std::lock_guard lock(mutex_);
    dumpers_.push_back({id, std::move(dump)});
    if (signal <= 0) return;
    if (watcher_pid_ != ::getpid()) {  // first here, or a forked child: the parent's thread is not ours
      watcher_pid_ = ::getpid();
      std::thread([this] { watch(); }).detach();
    }
    if (installed_ & (1ull << (signal % 64))) return;
    installed_ |= 1ull << (signal % 64);
    struct sigaction old {};
    if (::sigaction(signal, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return;
    struct sigaction now {};
    now.sa_handler = &flight_signal::handle;
    sigemptyset(&now.sa_mask);
    now.sa_flags = SA_RESTART;
    ::sigaction(signal, &now, nullptr);
  }
  void remove(const void* id) {
    std::lock_guard lock(mutex_);
    std::erase_if(dumpers_, [id](const entry& e) { return e.id == id; });
  }

  /// Dumps every registered record now; what the watcher does after a signal.
  void dump_all() {
    std::lock_guard lock(mutex_);  // a record unregisters only between dumps
    for (const entry& e : dumpers_) e.dump();
  }

 private:
  struct entry {
    const void* id;
    dumper dump;
  };

  flight_signal() { ::sem_init(&wake_, 0, 0); }

  static void handle(int) {
    process().raised_.store(true, std::memory_order_relaxed);
    ::sem_post(&process().wake_);
  }
  void watch() {
    for (;;) {
      if (::sem_wait(&wake_) != 0) continue;  // EINTR
      if (raised_.exchange(false)) dump_all();
    }
  }

  std::mutex mutex_;
  std::vector<entry> dumpers_;
  std::atomic<bool> raised_{false};
  sem_t wake_;
  pid_t watcher_pid_ = 0;
  unsigned long long installed_ = 0;
};

}  // namespace mimatrix::detail
