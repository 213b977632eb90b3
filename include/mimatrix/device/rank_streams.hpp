// What a rank keeps across its calls on device memory: one stream of its own on each
// port it has run calls on (its calls' work queues there, in order, as NCCL's does on a
// communicator's internal stream), and host staging buffers reused from call to call
// (pinned memory is slow to allocate).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "mimatrix/device/port.hpp"

namespace mimatrix::device {

/// Host memory of a port's, returned to its pool (or freed, once the pool is gone) when
/// it goes.
class host_buffer {
 public:
  host_buffer() = default;
  host_buffer(host_buffer&& o) noexcept { swap(o); }
  host_buffer& operator=(host_buffer&& o) noexcept {
    host_buffer(std::move(o)).swap(*this);
    return *this;
  }
  ~host_buffer();

  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  friend class rank_streams;
  struct pool;
  host_buffer(std::shared_ptr<pool> from, port* p, std::byte* data, std::size_t size)
      : from_(std::move(from)), port_(p), data_(data), size_(size) {}
  void swap(host_buffer& o) noexcept {
    std::swap(from_, o.from_);
    std::swap(port_, o.port_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
  }

  std::shared_ptr<pool> from_;
  port* port_ = nullptr;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Buffers given back, kept for the next calls (a few; the rest are freed).
struct host_buffer::pool {
  static constexpr std::size_t kept = 4;
  struct entry {
    port* owner;
    std::byte* data;
    std::size_t size;
  };
  std::mutex mutex;
  std::vector<entry> free;
  bool closed = false;

  void give_back(port* p, std::byte* data, std::size_t size) noexcept {
    {
      std::lock_guard lock(mutex);
      if (!closed && free.size() < kept) {
        free.push_back({p, data, size});
        return;
      }
    }
    p->free_host(data, size);
  }
  void close() noexcept {
    std::vector<entry> left;
    {
      std::lock_guard lock(mutex);
      closed = true;
      left.swap(free);
    }
    for (const entry& e : left) e.owner->free_host(e.data, e.size);
  }
};

inline host_buffer::~host_buffer() {
  if (!data_) return;
  if (from_)
    from_->give_back(port_, data_, size_);
  else
    port_->free_host(data_, size_);
}

/// @par Thread Safety
/// stream() and staging() may be called from any thread.
class rank_streams {
 public:
  rank_streams() = default;
  rank_streams(const rank_streams&) = delete;
  rank_streams& operator=(const rank_streams&) = delete;
  /// Frees the streams (each port must outlive the transport that used it) and the kept
  /// buffers; buffers still in use are freed when they go.
  ~rank_streams() {
    pool_->close();
    for (auto& [p, s] : streams_) p->free_stream(s);
  }

  /// This rank's stream on `p`, made on first use.
  stream_handle stream(port& p) {
    std::lock_guard lock(mutex_);
    auto& s = streams_[&p];
    if (!s) s = p.make_stream();
    return s;
  }

  /// Host memory of `p` of at least `bytes`: a kept buffer if one is large enough.
  host_buffer staging(port& p, std::size_t bytes) {
    {
      std::lock_guard lock(pool_->mutex);
      auto& free = pool_->free;
      for (std::size_t k = 0; k < free.size(); ++k)
        if (free[k].owner == &p && free[k].size >= bytes) {
          const host_buffer::pool::entry e = free[k];
          free.erase(free.begin() + std::ptrdiff_t(k));
          return host_buffer(pool_, e.owner, e.data, e.size);
        }
    }
    return host_buffer(pool_, &p, static_cast<std::byte*>(p.allocate_host(bytes)), bytes);
  }

 private:
  std::mutex mutex_;
  std::map<port*, stream_handle> streams_;
  std::shared_ptr<host_buffer::pool> pool_ = std::make_shared<host_buffer::pool>();
};

}  // namespace mimatrix::device
