// Peers on other hosts that went without a word, as the rendezvous store tells: it sets
// lost/<rank> when a rank's connection to it ends without closing (store::set_when_gone),
// and lost/any with it. A stalled call asks under its engine's lock, where a store request
// would queue behind any other on the same store object (the caller's blocking get, a
// split), stopping the rank's progress until that ended: a thread of its own reads the
// store, and the call takes what it last read.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/core/error.hpp"

namespace mimatrix::transport::detail::fabric {

/// Reads a group's lost/ keys (`prefix` + "lost/…") when asked, at most every `interval`.
///
/// @par Thread Safety
/// look() may be called from any thread.
class lost_watch {
 public:
  static constexpr std::chrono::milliseconds interval{250};
  /// How long one read of lost/any may wait for the store (a frozen host: then never again).
  static constexpr std::chrono::milliseconds patience{100};

  lost_watch(std::shared_ptr<bootstrap::store> store, std::string prefix, int rank, int size)
      : store_(std::move(store)), prefix_(std::move(prefix)), rank_(rank), size_(size) {}
  lost_watch(const lost_watch&) = delete;
  lost_watch& operator=(const lost_watch&) = delete;
  /// Waits for a read in progress (bounded by the store's own timeouts).
  ~lost_watch() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

  /// What the store said of lost peers at its last read, a rank and its words each ("(host b
  /// pid 4242) lost its connection …"), and asks for a new read. Never waits for the store.
  std::vector<std::pair<int, std::string>> look() {
    std::lock_guard lock(mutex_);
    if (lost_.empty() && !given_up_) {
      asked_ = true;
      if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
      wake_.notify_one();
    }
    return lost_;
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stop_ || asked_; });
      if (stop_) return;
      asked_ = false;
      lock.unlock();
      std::vector<std::pair<int, std::string>> found;
      bool failed = false;
      try {
        found = read();
      } catch (const error&) {  // the store is gone or frozen: the deadline and probes decide
        failed = true;
      }
      lock.lock();
      lost_ = std::move(found);
      given_up_ = failed;
      if (failed || !lost_.empty()) return;  // nothing more to learn
      if (wake_.wait_for(lock, interval, [&] { return stop_; })) return;
    }
  }

  std::vector<std::pair<int, std::string>> read() const {
    if (store_->add_within(prefix_ + "lost/any", 0, patience) == 0) return {};
    std::vector<std::pair<int, std::string>> lost;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      try {
        lost.emplace_back(r, bootstrap::text_of(store_->get(prefix_ + "lost/" + std::to_string(r), {})));
      } catch (const error&) {  // not this one
      }
    }
    return lost;
  }

  const std::shared_ptr<bootstrap::store> store_;
  const std::string prefix_;
  const int rank_, size_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::pair<int, std::string>> lost_;
  bool asked_ = false, given_up_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace mimatrix::transport::detail::fabric
