// c10d's Work over a mimatrix request, and the thread that sees requests end: c10d's
// futures (DDP's) complete without anyone calling wait(), so a thread of the process group
// waits for its calls in the order they started and completes each Work and its future.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/request.hpp"

namespace mimatrix::torch_backend {

/// One call: its request, what to do once it ended well (copy out of a staging tensor),
/// and the tensors c10d reads as its result.
class work final : public c10d::Work {
 public:
  work(int rank, c10d::OpType type, request pending, std::vector<at::Tensor> outputs,
       std::function<void()> after = {})
      : c10d::Work(rank, type),
        pending_(std::move(pending)),
        outputs_(std::move(outputs)),
        after_(std::move(after)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  /// Waits for the request and completes this Work and its future (the finisher's thread).
  void conclude() {
    std::exception_ptr failed;
    try {
      pending_.wait();
      if (after_) after_();
    } catch (...) {
      failed = std::current_exception();
    }
    finish(failed);  // first: whoever the future wakes finds the Work complete
    if (failed)
      future_->setError(failed);
    else
      future_->markCompleted(c10::IValue(outputs_));
  }

 private:
  request pending_;
  std::vector<at::Tensor> outputs_;
  std::function<void()> after_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

/// The thread that concludes a process group's calls, oldest first (calls of one group
/// end in the order they started, as every rank starts them in the same order).
class finisher {
 public:
  finisher() : thread_([this] { run(); }) {}
  ~finisher() { stop(); }

  /// Concludes what is queued, then ends the thread (no request is dropped unfinished).
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    ready_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  finisher(const finisher&) = delete;
  finisher& operator=(const finisher&) = delete;

  void add(c10::intrusive_ptr<work> w) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(w));
    }
    ready_.notify_one();
  }

 private:
  void run() {
    for (;;) {
      c10::intrusive_ptr<work> next;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      next->conclude();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<c10::intrusive_ptr<work>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: it starts once the members it reads exist
};

}  // namespace mimatrix::torch_backend
