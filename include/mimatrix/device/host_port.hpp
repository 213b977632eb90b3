// device::port on the host: each stream is a thread that runs its queued work in order,
// so the executor's device logic (stream order, events, gates, deferred completion) runs
// and is tested where there is no GPU. A lag before each operation makes the asynchrony
// visible: a step that used data before its copy ran would read stale memory.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>
#include <utility>

#include "mimatrix/device/port.hpp"
#include "mimatrix/reduce/host_kernels.hpp"

namespace mimatrix::device {

/// @par Thread Safety
/// As device::port; a stream is freed by one thread, after its last use.
class host_port final : public port {
 public:
  struct settings {
    /// How long each queued operation waits before it runs.
    std::chrono::microseconds lag{0};
  };

  host_port() : host_port(settings{}) {}
  explicit host_port(settings s) : settings_(s) {}
  host_port(const host_port&) = delete;
  host_port& operator=(const host_port&) = delete;
  /// Frees the streams not freed yet, running what they hold first.
  ~host_port() override {
    while (true) {
      queue* left = nullptr;
      {
        std::lock_guard lock(mutex_);
        if (streams_.empty()) return;
        left = *streams_.begin();
      }
      free_stream(left);
    }
  }

  std::string_view name() const override { return "host"; }

  stream_handle make_stream() override {
    auto* s = new queue;
    {
      std::lock_guard lock(mutex_);
      streams_.insert(s);
    }
    s->worker = std::thread([this, s] { run(*s); });
    return s;
  }
  void free_stream(stream_handle handle) noexcept override {
    auto* s = static_cast<queue*>(handle);
    {
      std::lock_guard lock(mutex_);
      s->stop = true;
    }
    changed_.notify_all();
    s->worker.join();  // runs what is queued first
    {
      std::lock_guard lock(mutex_);
      streams_.erase(s);
    }
    delete s;
  }

  void copy(stream_handle s, void* dst, const void* src, std::size_t bytes) override {
    enqueue(s, [=] {
      if (dst != src && bytes) std::memmove(dst, src, bytes);
    });
  }
  void combine(stream_handle s, const reduce::host_kernels& k, void* dst, const void* a, const void* b,
               std::size_t bytes) override {
    enqueue(s, [&k, dst, a, b, bytes] {
      k.combine(static_cast<std::byte*>(dst), static_cast<const std::byte*>(a), static_cast<const std::byte*>(b),
                bytes);
    });
  }
  void finalize(stream_handle s, const reduce::host_kernels& k, void* data, std::size_t bytes, int ranks) override {
    enqueue(s, [&k, data, bytes, ranks] { k.finalize(static_cast<std::byte*>(data), bytes, ranks); });
  }

  event record(stream_handle handle) override {
    auto* s = static_cast<queue*>(handle);
    std::lock_guard lock(mutex_);
    return new mark{s, s->queued};
  }
  bool done(event e) override {
    const auto* m = static_cast<const mark*>(e);
    std::lock_guard lock(mutex_);
    return m->on->finished >= m->count;
  }
  void free_event(event e) noexcept override { delete static_cast<mark*>(e); }
  void wait(stream_handle s, event e) override {
    const mark m = *static_cast<const mark*>(e);  // the event may be freed before this runs
    enqueue(s, [this, m] {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return m.on->finished >= m.count; });
    });
  }

  gate hold(stream_handle s) override {
    auto* g = new bool(false);
    enqueue(s, [this, g] {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return *g; });
      delete g;  // the opener touched it under the lock, before this saw it open
    });
    return g;
  }
  void open(stream_handle s, gate g) override {
    enqueue(s, [this, g] {
      {
        std::lock_guard lock(mutex_);
        *static_cast<bool*>(g) = true;
      }
      changed_.notify_all();
    });
  }

  void synchronize(stream_handle handle) override {
    auto* s = static_cast<queue*>(handle);
    std::unique_lock lock(mutex_);
    const std::uint64_t until = s->queued;
    changed_.wait(lock, [&] { return s->finished >= until; });
  }

  /// Queues `work` on `s` as a kernel would be: a test's stand-in for the caller's own
  /// device work before and after a collective.
  void enqueue(stream_handle handle, std::function<void()> work) {
    auto* s = static_cast<queue*>(handle);
    {
      std::lock_guard lock(mutex_);
      s->work.push_back(std::move(work));
      ++s->queued;
    }
    changed_.notify_all();
  }

 private:
  struct queue {
    std::deque<std::function<void()>> work;
    std::uint64_t queued = 0, finished = 0;
    bool stop = false;
    std::thread worker;
  };
  struct mark {
    queue* on;
    std::uint64_t count;  // done once `on` has finished this many operations
  };

  void run(queue& s) {
    std::unique_lock lock(mutex_);
    while (true) {
      changed_.wait(lock, [&] { return s.stop || !s.work.empty(); });
      if (s.work.empty()) return;  // stopped, and nothing left
      std::function<void()> next = std::move(s.work.front());
      s.work.pop_front();
      lock.unlock();
      if (settings_.lag.count() > 0) std::this_thread::sleep_for(settings_.lag);
      next();
      lock.lock();
      ++s.finished;
      changed_.notify_all();
    }
  }

  settings settings_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::set<queue*> streams_;
};

}  // namespace mimatrix::device
