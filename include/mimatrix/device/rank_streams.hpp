// What a rank keeps across its calls on device memory: one stream of its own on each
// port it has run calls on (its calls' work queues there, in order, as NCCL's does on a
// communicator's internal stream), and host staging and device scratch buffers reused
// from call to call (pinned and device memory are slow to allocate).
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "mimatrix/device/port.hpp"

namespace mimatrix::device {

/// Where a pooled buffer lives.
enum class memory_kind : unsigned char { host, device };

/// Memory of a port's (host or device), returned to its pool (or freed, once the pool is
/// gone) when it goes.
class pooled_buffer {
 public:
  pooled_buffer() = default;
  pooled_buffer(pooled_buffer&& o) noexcept { swap(o); }
  pooled_buffer& operator=(pooled_buffer&& o) noexcept {
    pooled_buffer(std::move(o)).swap(*this);
    return *this;
  }
  ~pooled_buffer();

  std::byte* data() const { return e_.data; }
  std::size_t size() const { return e_.size; }

 private:
  friend class rank_streams;
  struct pool;
  struct entry {
    port* owner = nullptr;
    memory_kind kind = memory_kind::host;
    std::byte* data = nullptr;
    std::size_t size = 0;
    void free() const noexcept {
      if (kind == memory_kind::host)
        owner->free_host(data, size);
      else
        owner->free_device(data, size);
    }
  };
  pooled_buffer(std::shared_ptr<pool> from, entry e) : from_(std::move(from)), e_(e) {}
  void swap(pooled_buffer& o) noexcept {
    std::swap(from_, o.from_);
    std::swap(e_, o.e_);
  }

  std::shared_ptr<pool> from_;
  entry e_;
};

/// Buffers given back, kept for the next calls (a few of each kind; the rest are freed).
struct pooled_buffer::pool {
  static constexpr std::size_t kept = 4;
  std::mutex mutex;
  std::vector<entry> free;
  bool closed = false;

  void give_back(const entry& e) noexcept {
    {
      std::lock_guard lock(mutex);
      const auto same_kind = std::count_if(free.begin(), free.end(), [&](const entry& f) { return f.kind == e.kind; });
      if (!closed && std::size_t(same_kind) < kept) {
        free.push_back(e);
        return;
      }
    }
    e.free();
  }
  void close() noexcept {
    std::vector<entry> left;
    {
      std::lock_guard lock(mutex);
      closed = true;
      left.swap(free);
    }
    for (const entry& e : left) e.free();
  }
};

inline pooled_buffer::~pooled_buffer() {
  if (!e_.data) return;
  if (from_)
    from_->give_back(e_);
  else
    e_.free();
}

/// @par Thread Safety
/// stream(), staging() and scratch() may be called from any thread.
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
  pooled_buffer staging(port& p, std::size_t bytes) { return take(p, memory_kind::host, bytes); }
  /// Device memory of `p` of at least `bytes`, as staging(); none for 0 bytes.
  pooled_buffer scratch(port& p, std::size_t bytes) {
    return bytes ? take(p, memory_kind::device, bytes) : pooled_buffer{};
  }

 private:
  pooled_buffer take(port& p, memory_kind kind, std::size_t bytes) {
    {
      std::lock_guard lock(pool_->mutex);
      auto& free = pool_->free;
      for (std::size_t k = 0; k < free.size(); ++k)
        if (free[k].owner == &p && free[k].kind == kind && free[k].size >= bytes) {
          const pooled_buffer::entry e = free[k];
          free.erase(free.begin() + std::ptrdiff_t(k));
          return pooled_buffer(pool_, e);
        }
    }
    void* data = kind == memory_kind::host ? p.allocate_host(bytes) : p.allocate_device(bytes);
    return pooled_buffer(pool_, {&p, kind, static_cast<std::byte*>(data), bytes});
  }

  std::mutex mutex_;
  std::map<port*, stream_handle> streams_;
  std::shared_ptr<pooled_buffer::pool> pool_ = std::make_shared<pooled_buffer::pool>();
};

}  // namespace mimatrix::device
