// A thread of a port's own that runs work in order: a retired block's close may wait for
// the device (as a free does), whose gates the importing thread (the progress thread)
// must stay free to open.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace mimatrix::device {

/// Runs work, in order, on a thread of its own, started by the first. Its destructor runs
/// what is left.
class closing_thread {
 public:
  closing_thread() = default;
  closing_thread(const closing_thread&) = delete;
  closing_thread& operator=(const closing_thread&) = delete;
  ~closing_thread() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    if (worker_.joinable()) worker_.join();
  }

  void run_later(std::function<void()> work) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(work));
      if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
    }
    wake_.notify_one();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopped, and nothing left
      auto next = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      next();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace mimatrix::device
