// A min-queue of keys that only rise (a radix heap), for the network's progressive filling.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mimatrix::transport::simulated {

namespace detail {

/// A min-queue of non-negative keys, each pushed no lower than the last one popped (a
/// radix heap): keys live in buckets by the highest bit where they differ from that one,
/// so a push is O(1) and a key moves down at most 64 buckets in all, where a binary heap
/// takes log n steps a push and a pop. Progressive filling's levels only rise.
class radix_heap {
 public:
  bool empty() const { return size_ == 0; }
  void clear() {
    for (auto& b : buckets_) b.clear();
    size_ = 0;
    last_ = 0;
  }
  /// Below the last key popped (rounding), it is taken as that key.
  void push(double key, std::uint32_t value) {
    const std::uint64_t bits = std::max(std::bit_cast<std::uint64_t>(std::max(key, 0.0)), last_);
    buckets_[bucket(bits)].push_back({bits, value});
    ++size_;
  }
  /// top() and pop() need a key in the queue.
  double top() {
    settle();
    return std::bit_cast<double>(last_);
  }
  std::uint32_t pop() {
    settle();
    const std::uint32_t value = buckets_[0].back().value;
    buckets_[0].pop_back();
    --size_;
    return value;
  }

 private:
  struct entry {
    std::uint64_t key;  // a non-negative double's bits: ordered as the doubles are
    std::uint32_t value;
  };
  std::size_t bucket(std::uint64_t key) const { return static_cast<std::size_t>(std::bit_width(key ^ last_)); }
  // Bucket 0 gets the least keys: the first bucket in use is split around its least key,
  // which differs from every key there only below that bucket's bit.
  void settle() {
    if (!buckets_[0].empty()) return;
    std::size_t i = 1;
    while (buckets_[i].empty()) ++i;
    auto& b = buckets_[i];
    last_ = b[0].key;
    for (const entry& e : b) last_ = std::min(last_, e.key);
    for (const entry& e : b) buckets_[bucket(e.key)].push_back(e);
    b.clear();
  }

  std::array<std::vector<entry>, 65> buckets_;  // by bit_width(key ^ last_): 0 to 64
  std::uint64_t last_ = 0;
  std::size_t size_ = 0;
};

}  // namespace detail

}  // namespace mimatrix::transport::simulated
