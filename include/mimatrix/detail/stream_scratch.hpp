// Device memory that a composed call uses between its parts (detail/across_hosts.hpp's
// reduce-scatter), on the caller's streams. A block is lent again only once an event
// recorded on the caller's stream after the call's last part has completed: calls in
// flight on other streams never share one. A block whose call failed is never lent again
// (a failed part lets the caller's stream go on while peers' writes into it may still be
// queued). Blocks are kept until the object goes, as the transport's pools keep theirs: a
// free may wait for the whole device (CUDA), gates included.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

#include "mimatrix/device/port.hpp"

namespace mimatrix::detail {

/// @par Thread Safety
/// One thread at a time, as the collectives object that holds it.
class stream_scratch {
 public:
  stream_scratch() = default;
  stream_scratch(const stream_scratch&) = delete;
  stream_scratch& operator=(const stream_scratch&) = delete;
  /// Waits for the work that still uses a block, then frees them all (a device error
  /// ends the wait: the device runs nothing more).
  ~stream_scratch() {
    for (block& b : blocks_) {
      if (b.until) {
        try {
          while (!b.port->done(b.until)) std::this_thread::sleep_for(std::chrono::microseconds(100));
        } catch (...) {  // NOLINT(bugprone-empty-catch): see above
        }
        b.port->free_event(b.until);
      }
      b.port->free_device(b.memory, b.bytes);
    }
  }

  /// A block of at least `bytes` of `port`'s memory that no queued work uses: the
  /// smallest kept one that fits, or a new one. Its index, for at() and release_after().
  std::size_t take(device::port& port, std::size_t bytes) {
    std::size_t best = blocks_.size();
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      block& b = blocks_[i];
      if (b.taken || *b.spoiled || b.port != &port || b.bytes < bytes) continue;
      if (b.until && !port.done(b.until)) continue;
      if (best == blocks_.size() || b.bytes < blocks_[best].bytes) best = i;
    }
    if (best == blocks_.size()) {
      blocks_.push_back({&port, port.allocate_device(bytes ? bytes : 1), bytes ? bytes : 1, nullptr, false,
                         std::make_shared<std::atomic<bool>>(false)});
    } else if (blocks_[best].until) {
      port.free_event(blocks_[best].until);
      blocks_[best].until = nullptr;
    }
    blocks_[best].taken = true;
    return best;
  }

  std::byte* at(std::size_t i) const { return static_cast<std::byte*>(blocks_[i].memory); }

  /// Set once block i's call has failed: the block is never lent again. Shared with the
  /// call's request, which may outlive this object.
  std::shared_ptr<std::atomic<bool>> spoiled(std::size_t i) const { return blocks_[i].spoiled; }

  /// Block i may be lent again once the work queued on `s` so far is done.
  void release_after(std::size_t i, device::stream_handle s) {
    block& b = blocks_[i];
    b.until = b.port->record(s);
    b.taken = false;
  }

  std::size_t blocks() const { return blocks_.size(); }

 private:
  struct block {
    device::port* port;
    void* memory;
    std::size_t bytes;
    device::event until = nullptr;  // done: no queued work uses it
    bool taken = false;             // by a call being made now
    std::shared_ptr<std::atomic<bool>> spoiled;
  };
  std::vector<block> blocks_;
};

}  // namespace mimatrix::detail
