// A dump asked for by a signal (MIMATRIX_FLIGHT_RECORD_SIGNAL): the handler only raises an
// atomic flag; mimatrix code that runs outside every engine lock serves it (a wait()'s or
// the progress thread's idle pause, a test(), a call's start). No thread of its own: a
// second thread makes every shared_ptr copy and malloc of a single-threaded rank atomic.
#pragma once

#include <atomic>

namespace mimatrix::transport {

class dump_request {
 public:
  using serve_fn = void (*)();

  /// Async-signal-safe: a lock-free store.
  static void raise() noexcept { raised().store(true, std::memory_order_relaxed); }
  /// What serves a raised request (the flight records' dump); set once, before a signal.
  static void set_server(serve_fn serve) noexcept { server().store(serve, std::memory_order_release); }
  /// Serves a raised request; a relaxed load otherwise. Call it outside every lock.
  static void serve_if_raised() {
    if (!raised().load(std::memory_order_relaxed) || !raised().exchange(false, std::memory_order_acquire)) return;
    if (const serve_fn serve = server().load(std::memory_order_acquire)) serve();
  }

 private:
  static std::atomic<bool>& raised() noexcept {
    static std::atomic<bool> flag{false};
    return flag;
  }
  static std::atomic<serve_fn>& server() noexcept {
    static std::atomic<serve_fn> fn{nullptr};
    return fn;
  }
};

}  // namespace mimatrix::transport
