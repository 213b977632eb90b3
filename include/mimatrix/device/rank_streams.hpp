// What a rank keeps across its calls on device memory: streams of its own on each port it
// has run calls on, one a call in flight (a call queues its work there as its messages
// land), and host staging and device scratch buffers reused from call to call (streams,
// pinned and device memory are slow to make).
#pragma once

#include <algorithm>
#include <cstddef>
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
    std::weak_ptr<const void> alive = owner ? owner->lifetime() : std::weak_ptr<const void>();
    bool of(const port& p) const { return owner == &p && !alive.expired(); }  // not a port gone before it
    void free() const noexcept {
      if (alive.expired()) return;  // its port freed it as it went
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

/// Buffers given back, kept for the next calls, every one until the rank goes: on CUDA,
/// freeing device or pinned memory waits for all work on the device, a call's gate
/// included, which the freeing thread (the progress thread) may be the one to open. The
/// pool holds what the most calls at once used, as a caching allocator does.
struct pooled_buffer::pool {
  std::mutex mutex;
  std::vector<entry> free;
  bool closed = false;

  void give_back(const entry& e) noexcept {
    {
      std::lock_guard lock(mutex);
      if (!closed) {
        try {
          free.push_back(e);
          return;
        } catch (...) {  // no memory for the entry: free the buffer instead
        }
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

/// A stream of a rank's on a port, one call's while it runs; given back to the rank (or
/// freed, once the rank is gone) when it goes. Work queued on it before stays queued.
///
/// Not one stream for all of a rank's calls: a call queues its landings as they arrive,
/// so the next call's first work (a wait for its caller's stream, which waits behind the
/// earlier call's gate) would block the earlier call's later landings on a shared stream,
/// and neither would end: two calls on one caller's stream, as a bucketed allreduce makes
/// them, hung (regression test: resnet_device_gradients_test).
class pooled_stream {
 public:
  pooled_stream() = default;
  pooled_stream(pooled_stream&& o) noexcept { swap(o); }
  pooled_stream& operator=(pooled_stream&& o) noexcept {
    pooled_stream(std::move(o)).swap(*this);
    return *this;
  }
  ~pooled_stream();

  stream_handle get() const { return k_.handle; }

 private:
  friend class rank_streams;
  struct pool;
  /// A stream and its port, freed unless the port has gone (its end freed it).
  struct kept {
    port* owner = nullptr;
    stream_handle handle = nullptr;
    std::weak_ptr<const void> alive = owner ? owner->lifetime() : std::weak_ptr<const void>();
    bool of(const port& p) const { return owner == &p && !alive.expired(); }
    void free() const noexcept {
      if (!alive.expired()) owner->free_stream(handle);
    }
  };
  pooled_stream(std::shared_ptr<pool> from, kept k) : from_(std::move(from)), k_(std::move(k)) {}
  void swap(pooled_stream& o) noexcept {
    std::swap(from_, o.from_);
    std::swap(k_, o.k_);
  }

  std::shared_ptr<pool> from_;
  kept k_;
};

/// Streams given back, kept for the next calls (as many as ran at once).
struct pooled_stream::pool {
  std::mutex mutex;
  std::vector<kept> free;
  bool closed = false;

  void give_back(const kept& k) noexcept {
    {
      std::lock_guard lock(mutex);
      if (!closed) {
        try {
          free.push_back(k);
          return;
        } catch (...) {  // no memory for the entry: free the stream instead
        }
      }
    }
    k.free();
  }
  void close() noexcept {
    std::vector<kept> left;
    {
      std::lock_guard lock(mutex);
      closed = true;
      left.swap(free);
    }
    for (const kept& k : left) k.free();
  }
};

inline pooled_stream::~pooled_stream() {
  if (!k_.handle) return;
  if (from_)
    from_->give_back(k_);
  else
    k_.free();
}

/// @par Thread Safety
/// take_stream(), staging(), scratch() and made_outside() may be called from any thread.
class rank_streams {
 public:
  /// What a call needed that the pool did not hold, while made_outside() kept its takes
  /// to the pool (not a std::exception: nothing on the way may mistake it for a failure).
  struct shortfall {
    port* owner = nullptr;
    bool stream = false;  // else a buffer of `kind`, `bytes` long
    memory_kind kind = memory_kind::host;
    std::size_t bytes = 0;
  };

  rank_streams() = default;
  rank_streams(const rank_streams&) = delete;
  rank_streams& operator=(const rank_streams&) = delete;
  /// Frees the kept streams (each port must outlive the transport that used it) and
  /// buffers; those still in use are freed when they go.
  ~rank_streams() {
    streams_->close();
    pool_->close();
  }

  /// make() (which takes a progress engine's lock and makes a call) with the takes of this
  /// thread from this rank limited to what the pool holds. Where the pool lacks a stream
  /// or a buffer, the call is unmade, the pool grows here, with no lock held, and make()
  /// runs again. On CUDA, allocating pinned or device memory may wait for the device
  /// (CUDA's implicit synchronizations), and so for another call's gate, which only the
  /// progress thread can open, and only once it has the lock. make() must take nothing
  /// from this rank after it has queued device work: an unmade call leaves none behind.
  template <class Make>
  auto made_outside(Make&& make) -> decltype(make()) {
    const struct release_later {
      rank_streams& of;
      ~release_later() { of.release_deferred(); }  // make() has let go of its lock
    } deferred{*this};
    for (int attempt = 0;; ++attempt) {
      shortfall missing;
      {
        // Past a few tries (other threads of the rank took what grew), a call allocates as
        // before rather than never being made.
        const pool_only scope(*this, attempt < max_attempts);
        try {
          return make();
        } catch (const shortfall& s) {
          missing = s;
        }
      }
      grow(missing);
    }
  }

  /// Keeps `work` (an unmade call's device work and what it uses) until made_outside()'s
  /// make() has returned or thrown, and lets it go there: letting go waits for the work,
  /// which may wait behind an earlier call's gate that the lock make() holds keeps shut.
  void let_go_later(std::shared_ptr<void> work) {
    if (!work) return;
    std::lock_guard lock(deferred_mutex_);
    deferred_.push_back(std::move(work));
  }

  /// A stream of `p` for one call: a kept one, or a new one.
  pooled_stream take_stream(port& p) {
    {
      std::lock_guard lock(streams_->mutex);
      auto& free = streams_->free;
      for (std::size_t k = 0; k < free.size(); ++k)
        if (free[k].of(p)) {
          pooled_stream::kept s = std::move(free[k]);
          free.erase(free.begin() + std::ptrdiff_t(k));
          return pooled_stream(streams_, std::move(s));
        }
    }
    if (pool_only_ == this) throw shortfall{&p, true};
    return pooled_stream(streams_, {&p, p.make_stream()});
  }

  /// Host memory of `p` of at least `bytes`: the smallest kept buffer that is large enough,
  /// else a new one.
  pooled_buffer staging(port& p, std::size_t bytes) { return take(p, memory_kind::host, bytes); }
  /// Device memory of `p` of at least `bytes`, as staging(); none for 0 bytes.
  pooled_buffer scratch(port& p, std::size_t bytes) {
    return bytes ? take(p, memory_kind::device, bytes) : pooled_buffer{};
  }

 private:
  static constexpr int max_attempts = 8;

  /// Within it, this thread's takes from `r` throw a shortfall instead of allocating.
  class pool_only {
   public:
    pool_only(const rank_streams& r, bool on) : before_(pool_only_) {
      if (on) pool_only_ = &r;
    }
    ~pool_only() { pool_only_ = before_; }
    pool_only(const pool_only&) = delete;
    pool_only& operator=(const pool_only&) = delete;

   private:
    const rank_streams* before_;
  };

  /// Makes what a call lacked and keeps it in the pool for the call's next try.
  void grow(const shortfall& s) {
    if (s.stream) {
      const pooled_stream made(streams_, {s.owner, s.owner->make_stream()});  // kept as it goes
      return;
    }
    void* data = s.kind == memory_kind::host ? s.owner->allocate_host(s.bytes) : s.owner->allocate_device(s.bytes);
    const pooled_buffer made(pool_, {s.owner, s.kind, static_cast<std::byte*>(data), s.bytes});  // kept as it goes
  }

  pooled_buffer take(port& p, memory_kind kind, std::size_t bytes) {
    {
      std::lock_guard lock(pool_->mutex);
      auto& free = pool_->free;
      std::size_t best = free.size();  // the smallest that is large enough: large ones stay for large calls
      for (std::size_t k = 0; k < free.size(); ++k)
        if (free[k].of(p) && free[k].kind == kind && free[k].size >= bytes &&
            (best == free.size() || free[k].size < free[best].size))
          best = k;
      if (best < free.size()) {
        const pooled_buffer::entry e = free[best];
        free.erase(free.begin() + std::ptrdiff_t(best));
        return pooled_buffer(pool_, e);
      }
    }
    if (pool_only_ == this) throw shortfall{&p, false, kind, bytes};
    void* data = kind == memory_kind::host ? p.allocate_host(bytes) : p.allocate_device(bytes);
    return pooled_buffer(pool_, {&p, kind, static_cast<std::byte*>(data), bytes});
  }

  void release_deferred() noexcept {
    std::vector<std::shared_ptr<void>> going;
    {
      std::lock_guard lock(deferred_mutex_);
      going.swap(deferred_);
    }
  }  // `going` waits for its work here

  static inline thread_local const rank_streams* pool_only_ = nullptr;
  std::mutex deferred_mutex_;
  std::vector<std::shared_ptr<void>> deferred_;

  std::shared_ptr<pooled_stream::pool> streams_ = std::make_shared<pooled_stream::pool>();
  std::shared_ptr<pooled_buffer::pool> pool_ = std::make_shared<pooled_buffer::pool>();
};

}  // namespace mimatrix::device
