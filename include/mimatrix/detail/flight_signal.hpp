// MIMATRIX_FLIGHT_RECORD_SIGNAL (default SIGUSR1): a signal that dumps every flight record
// of the process. The handler only raises an atomic flag (transport::dump_request); the
// dumps are written where mimatrix runs outside its engine's lock: the idle pause of a
// wait() or of the progress thread (a rank stuck in a call dumps within a few ms), a
// test(), or the next call's start.
#pragma once

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/transport/dump_request.hpp"

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
/// Every member from any thread; the signal handler only raises transport::dump_request.
class flight_signal {
 public:
  using dumper = std::function<void()>;

  static flight_signal& process() {
    static flight_signal* one = new flight_signal;  // never destroyed: a dump may come late in exit
    return *one;
  }

  /// Registers `dump` under `id` and, the first time in this process, installs the handler
  /// of `signal` (unless the program handles that signal itself: its handler stays).
  void add(const void* id, dumper dump, int signal) {
    std::lock_guard lock(mutex_);
    dumpers_.push_back({id, std::move(dump)});
    if (signal <= 0) return;
    transport::dump_request::set_server([] { process().dump_all(); });
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

  /// Dumps every registered record now: what a raised signal comes to.
  void dump_all() {
    std::lock_guard lock(mutex_);  // a record unregisters only between dumps
    for (const entry& e : dumpers_) e.dump();
  }

 private:
  struct entry {
    const void* id;
    dumper dump;
  };

  flight_signal() = default;

  static void handle(int) { transport::dump_request::raise(); }

  std::mutex mutex_;
  std::vector<entry> dumpers_;
  unsigned long long installed_ = 0;
};

}  // namespace mimatrix::detail
