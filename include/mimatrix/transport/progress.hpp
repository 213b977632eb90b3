// Progress as MPI defines it: every test() or wait() advances every call in flight on the
// communicator, not only its own, and an optional thread advances them while the caller
// computes. Transports supply the executions and how to pause when nothing moves.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/core/operation.hpp"
#include "mimatrix/core/options.hpp"
#include "mimatrix/transport/dump_request.hpp"

namespace mimatrix::transport {

class progress_engine;

/// One call in flight on one rank. Its transport implements a round of progress and what
/// to check when a round moved nothing; completion and the error live here.
class execution : public mimatrix::detail::operation {
 public:
  // Declared inline, as every virtual here: a virtual function declared without it is the
  // class's key function, and each unit that includes this header emitted the vtable and
  // the executor with it (a unit including transport/inproc.hpp: 4x the compile time).
  inline bool test(std::error_code& ec) final;
  inline void wait(std::error_code& ec) final;
  const std::string& message() const final {
    static const std::string none;
    return ending_ ? ending_->message : none;
  }
  /// Where a failure began: the first failing rank's and call's own words, which failures
  /// derived from it (another rank's, a later call's) quote instead of each other's.
  const std::string& origin() const { return ending_ && !ending_->origin.empty() ? ending_->origin : message(); }

  bool finished() const { return finished_; }

 protected:
  explicit execution(progress_engine& engine) : engine_(engine) {}
  ~execution() override = default;

  /// Joins the engine's calls in flight; the derived constructor calls it last, once the
  /// call can run.
  void enter();
  /// Waits for the call if it has not ended, then leaves the engine. Every derived
  /// destructor calls it first, while its members still live.
  void leave() noexcept;

  /// One round of progress without blocking; true if anything changed.
  virtual bool advance() = 0;
  /// Called after rounds that changed nothing for this call, with how many in a row:
  /// where deadlines and liveness are checked.
  virtual void idle(int rounds) = 0;

  void succeed() { finished_ = true; }
  void end_with(errc code, std::string message, std::string origin = {}) {
    ending_ = std::make_unique<ending>(ending{make_error_code(code), std::move(message), std::move(origin)});
    finished_ = true;
  }
  progress_engine& engine() { return engine_; }

 private:
  friend class progress_engine;
  progress_engine& engine_;
  bool finished_ = false;
  bool entered_ = false;
  int idle_rounds_ = 0;
  struct ending {
    std::error_code ec;
    std::string message;
    std::string origin;  // empty: the message is its own origin
  };
  std::unique_ptr<ending> ending_;  // a failed call's; none while it runs or once it succeeded
  std::error_code ending_code() const { return ending_ ? ending_->ec : std::error_code{}; }
};

/// How a transport waits when a round moved nothing: a snapshot taken before the round
/// lets it sleep until something new arrives instead of a fixed time.
class progress_port {
 public:
  virtual ~progress_port() = default;
  virtual std::uint64_t snapshot() { return 0; }
  /// Blocks briefly (at most a few milliseconds: deadlines are checked between pauses).
  virtual void pause(std::uint64_t snapshot, int idle_rounds) = 0;
  /// Run by the progress thread every idle_poll while no call is in flight, under the
  /// engine's lock: where a transport reads what peers send between calls (an abort).
  virtual void idle() {}
};

/// How often the progress thread looks at the transport while no call is in flight.
inline constexpr std::chrono::milliseconds idle_poll{10};

/// The calls in flight of one communicator, and the thread that may drive them.
///
/// @par Thread Safety
/// Every member may be called from any thread: one recursive mutex guards the calls.
class progress_engine {
 public:
  explicit progress_engine(std::unique_ptr<progress_port> port) : port_(std::move(port)) {}
  progress_engine(const progress_engine&) = delete;
  progress_engine& operator=(const progress_engine&) = delete;
  ~progress_engine() { set_mode(progress_mode::caller); }

  /// Held by the transport while it starts a call or touches state the calls share.
  std::unique_lock<std::recursive_mutex> lock() { return std::unique_lock(mutex_); }

  /// caller: progress only inside test() and wait(). thread: a thread advances the calls
  /// in flight as well (MIMATRIX_PROGRESS=thread).
  void set_mode(progress_mode mode) {
    if (mode == progress_mode::thread && !thread_.joinable()) {
      stop_ = false;
      thread_ = std::thread([this] { run(); });
    } else if (mode == progress_mode::caller && thread_.joinable()) {
      {
        std::lock_guard lock(mutex_);
        stop_ = true;
      }
      work_.notify_all();
      thread_.join();
    }
  }
  progress_mode mode() const { return thread_.joinable() ? progress_mode::thread : progress_mode::caller; }

  /// Calls in flight now.
  std::size_t in_flight() {
    std::lock_guard lock(mutex_);
    return calls_.size();
  }

  /// One round over every call in flight; true once `e` has ended.
  bool test(execution& e) {
    std::lock_guard lock(mutex_);
    round();
    return e.finished_;
  }

  /// Rounds over every call in flight until `e` has ended (its deadline bounds this).
  void wait(execution& e) {
    int idle = 0;
    while (true) {
      std::uint64_t seen;
      {
        std::lock_guard lock(mutex_);
        seen = port_->snapshot();
        if (round()) {
          idle = 0;
          if (e.finished_) return;
          continue;
        }
        if (e.finished_) return;
      }
      dump_request::serve_if_raised();  // a rank stuck here still dumps on the signal
      port_->pause(seen, ++idle);
    }
  }

 private:
  friend class execution;

  void add(execution* e) {
    std::lock_guard lock(mutex_);
    calls_.push_back(e);
    work_.notify_all();
  }
  void remove(execution* e) {
    std::lock_guard lock(mutex_);
    calls_.erase(std::remove(calls_.begin(), calls_.end(), e), calls_.end());
  }

  /// Advances each call in flight until it stops changing; true if any did. Ended calls
  /// leave the list (their requests still own them). Called under mutex_.
  bool round() {
    bool any = false;
    // Calls join and leave only outside a round (start() and destructors hold the lock).
    for (std::size_t k = 0; k < calls_.size(); ++k) {
      execution& e = *calls_[k];
      if (e.finished_) continue;
      bool changed = false;
      while (!e.finished_ && e.advance()) changed = true;
      if (changed || e.finished_) {
        e.idle_rounds_ = 0;
        any = true;
      } else {
        e.idle(++e.idle_rounds_);
        any |= e.finished_;
      }
    }
    calls_.erase(std::remove_if(calls_.begin(), calls_.end(), [](execution* e) { return e->finished_; }),
                 calls_.end());
    return any;
  }

  void run() {
    int idle = 0;
    std::unique_lock lock(mutex_);
    while (!stop_) {
      if (calls_.empty()) {
        if (!work_.wait_for(lock, idle_poll, [&] { return stop_ || !calls_.empty(); })) port_->idle();
        idle = 0;
        continue;
      }
      const std::uint64_t seen = port_->snapshot();
      if (round()) {
        idle = 0;
        continue;
      }
      lock.unlock();
      dump_request::serve_if_raised();
      port_->pause(seen, ++idle);
      lock.lock();
    }
  }

  std::unique_ptr<progress_port> port_;
  std::recursive_mutex mutex_;
  std::condition_variable_any work_;
  std::vector<execution*> calls_;
  std::thread thread_;
  bool stop_ = false;
};

inline bool execution::test(std::error_code& ec) {
  const bool done = engine_.test(*this);
  dump_request::serve_if_raised();  // after the lock: a caller that polls test() dumps too
  ec = done ? ending_code() : std::error_code{};
  return done;
}

inline void execution::wait(std::error_code& ec) {
  engine_.wait(*this);
  ec = ending_code();
}

inline void execution::enter() {
  entered_ = true;
  engine_.add(this);
}

inline void execution::leave() noexcept {
  if (!entered_) return;
  if (!finished_) {
    std::error_code ignored;
    wait(ignored);
  }
  engine_.remove(this);
  entered_ = false;
}

}  // namespace mimatrix::transport
