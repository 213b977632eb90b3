// A caching allocator for one stream's memory, as PyTorch's CUDA allocator: freed blocks are
// kept and handed out again, so a training step allocates nothing from the driver after the
// first. Plain C++ over a raw allocator, so its logic is tested on the host.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

namespace mimatrix::resnet::nn_cuda {

/// What a pool holds and has done.
struct pool_statistics {
  std::size_t in_use_bytes = 0;      // handed out, not yet released (rounded sizes)
  std::size_t cached_bytes = 0;      // released, kept for reuse
  std::size_t raw_allocations = 0;   // calls to the raw allocator (cudaMalloc)
  std::size_t raw_frees = 0;
  std::size_t reuses = 0;            // allocations served from the cache
};

/// The sizes a pool hands out, and which cached block may serve a request.
struct pool_policy {
  std::size_t granularity = 512;  // every size is rounded up to a multiple (cudaMalloc's alignment)
  /// A cached block up to this fraction larger than the request may serve it: a network's
  /// tensors repeat exactly step after step, and a last, smaller batch reuses its
  /// neighbours' blocks instead of allocating its own.
  double slack = 0.25;
};

/// Memory for work queued on one stream (nn_cuda::context's): a block released while the
/// stream still has work on it may be given out again at once, because whatever is queued
/// later on that stream runs after that work. A block must not be handed to another stream.
///
/// `Raw` has `void* allocate(std::size_t)`, null when the device is full (other failures
/// throw), and `void free(void*)`. When the device is full, the pool gives its cache back and
/// tries once more (cudaFree waits for the device, so no cached block is in use by then).
///
/// @par Thread Safety
/// Safe from any thread (a mutex); the stream rule above is the caller's.
template <class Raw>
class caching_pool {
 public:
  explicit caching_pool(Raw raw = {}, pool_policy policy = {}) : raw_(std::move(raw)), policy_(policy) {
    if (policy_.granularity == 0 || !(policy_.slack >= 0))
      throw std::invalid_argument("nn_cuda::caching_pool: granularity must be positive and slack not negative");
  }
  /// Gives every cached block back. Blocks still in use are the holders' to release first.
  ~caching_pool() { trim(); }
  caching_pool(const caching_pool&) = delete;
  caching_pool& operator=(const caching_pool&) = delete;

  /// At least `bytes` (null for 0). Throws std::runtime_error naming the size and what the
  /// pool holds when the raw allocator fails even with the cache given back.
  [[nodiscard]] void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    const std::size_t size = rounded(bytes);
    std::lock_guard lock(mutex_);
    if (void* p = take_cached(size)) return p;
    void* p = raw_.allocate(size);
    if (p == nullptr) {
      trim_locked();
      p = raw_.allocate(size);
    }
    if (p == nullptr)
      throw std::runtime_error("nn_cuda::caching_pool: cannot allocate " + std::to_string(size) +
                               " bytes, with " + std::to_string(stats_.in_use_bytes) +
                               " bytes in use by this pool and its cache given back: the device is full");
    ++stats_.raw_allocations;
    in_use_.emplace(p, size);
    stats_.in_use_bytes += size;
    return p;
  }

  /// Back to the cache. `p` must come from allocate() and not be released yet.
  void release(void* p) {
    if (p == nullptr) return;
    std::lock_guard lock(mutex_);
    const auto it = in_use_.find(p);
    if (it == in_use_.end())
      throw std::invalid_argument("nn_cuda::caching_pool: released a block it did not hand out or already took back");
    const std::size_t size = it->second;
    in_use_.erase(it);
    stats_.in_use_bytes -= size;
    cached_.emplace(size, p);
    stats_.cached_bytes += size;
  }

  /// Gives every cached block to the raw allocator (PyTorch's empty_cache).
  void trim() {
    std::lock_guard lock(mutex_);
    trim_locked();
  }

  [[nodiscard]] pool_statistics statistics() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  [[nodiscard]] std::size_t rounded(std::size_t bytes) const {
    return (bytes + policy_.granularity - 1) / policy_.granularity * policy_.granularity;
  }

 private:
  // The smallest cached block that fits, if it is within the slack.
  void* take_cached(std::size_t size) {
    const auto it = cached_.lower_bound(size);
    if (it == cached_.end() || double(it->first) > double(size) * (1.0 + policy_.slack)) return nullptr;
    const auto [block_size, p] = *it;
    cached_.erase(it);
    stats_.cached_bytes -= block_size;
    in_use_.emplace(p, block_size);
    stats_.in_use_bytes += block_size;
    ++stats_.reuses;
    return p;
  }

  void trim_locked() {
    for (const auto& [size, p] : cached_) {
      raw_.free(p);
      ++stats_.raw_frees;
    }
    cached_.clear();
    stats_.cached_bytes = 0;
  }

 private:
  Raw raw_;
  pool_policy policy_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> cached_;     // by size: the best fit is a lower_bound
  std::unordered_map<void*, std::size_t> in_use_;
  pool_statistics stats_;
};

}  // namespace mimatrix::resnet::nn_cuda
