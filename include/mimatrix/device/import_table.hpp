// The peers' blocks of device memory that a port has opened, by owner and address. A
// block stays open between calls, since opening costs milliseconds on CUDA; but a peer may
// free its buffer and allocate another (a framework's allocator does). CUDA leaves
// freeing an exported block while another process has it open undefined, and an open
// block keeps its memory from being reused, so every call on fresh buffers would pin
// more of the peer's GPU. An owner's live allocations never overlap: a block that
// overlaps a newer one from the same owner was freed there, and is retired (closed).
#pragma once

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include "mimatrix/device/port.hpp"

namespace mimatrix::device {

/// This process's shared_memory::owner: its pid and 32 random bits, drawn again in a
/// child after fork (a child's allocations are not its parent's); pids alone may repeat
/// across containers on one node. Lock-free, so that a fork while another thread draws
/// leaves no lock held.
inline std::uint64_t this_process() {
  static std::atomic<std::uint64_t> current{0};
  const auto self = std::uint64_t(std::uint32_t(::getpid()));
  std::uint64_t seen = current.load(std::memory_order_acquire);
  while (seen == 0 || (seen & 0xffff'ffffu) != self) {
    std::random_device random;
    const std::uint64_t mine = std::uint64_t(random() | 1u) << 32 | self;
    if (current.compare_exchange_strong(seen, mine, std::memory_order_acq_rel)) return mine;
  }  // else another thread drew first: `seen` is its draw now
  return seen;
}

/// Not thread-safe: its port guards it.
class import_table {
 public:
  /// A block open here: this process's address of it, and its size.
  struct opened {
    std::byte* at = nullptr;
    std::uint64_t bytes = 0;
  };

  /// This process's address of `block` if it is open here; nullptr if not.
  std::byte* find(const shared_memory& block) const {
    const auto it = open_.find({block.owner, block.base});
    return it != open_.end() && it->second.handle == block.handle ? it->second.block.at : nullptr;
  }

  /// Records `block` open at `at`, and retires the owner's blocks it overlaps: they were
  /// freed there. Returns those, for the port to close.
  std::vector<opened> add(const shared_memory& block, std::byte* at) {
    std::vector<opened> retired;
    // Blocks of one owner never overlap each other, so their ends rise with their starts:
    // walk back from the first that starts at or past the new block's end.
    auto it = open_.lower_bound({block.owner, block.base + span(block.bytes)});
    while (it != open_.begin()) {
      auto before = std::prev(it);
      const auto& [key, e] = *before;
      if (key.first != block.owner || key.second + span(e.block.bytes) <= block.base) break;
      retired.push_back(e.block);
      it = open_.erase(before);
    }
    open_[{block.owner, block.base}] = {block.handle, {at, block.bytes}};
    return retired;
  }

  /// Every block open here, forgotten (the port closes them as it goes).
  std::vector<opened> take_all() {
    std::vector<opened> all;
    for (const auto& [key, e] : open_) all.push_back(e.block);
    open_.clear();
    return all;
  }

  std::size_t size() const { return open_.size(); }

 private:
  struct entry {
    std::array<std::byte, 64> handle{};
    opened block;
  };
  /// An empty block still holds its address.
  static std::uint64_t span(std::uint64_t bytes) { return bytes ? bytes : 1; }

  std::map<std::pair<std::uint64_t, std::uint64_t>, entry> open_;  // by (owner, base there)
};

/// The blocks this process exported, whichever port exported them. Ranks of one process
/// read each other's blocks where they lie: CUDA cannot open a handle in the process that
/// made it.
class process_exports {
 public:
  static process_exports& instance() {
    static process_exports exports;
    return exports;
  }
  /// Records `block`, which starts at `base` here, and forgets the blocks it overlaps
  /// (freed since).
  void record(const shared_memory& block, std::byte* base) {
    std::lock_guard lock(mutex_);
    for (auto it = blocks_.begin(); it != blocks_.end();) {
      const auto& [start, bytes] = it->second;
      const bool overlaps = start < base + block.bytes && base < start + bytes;
      it = overlaps && it->first != block.handle ? blocks_.erase(it) : std::next(it);
    }
    blocks_[block.handle] = {base, block.bytes};
  }
  /// Where `block` starts, if this process exported it; nullptr if not.
  std::byte* find(const shared_memory& block) const {
    std::lock_guard lock(mutex_);
    const auto it = blocks_.find(block.handle);
    return it == blocks_.end() ? nullptr : it->second.first;
  }
  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return blocks_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::array<std::byte, 64>, std::pair<std::byte*, std::uint64_t>> blocks_;  // by handle: start, size
};

}  // namespace mimatrix::device
