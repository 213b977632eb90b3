// Which devices of one process may read each other's memory in their kernels (CUDA peer
// access). Ranks of one process on several GPUs land and reduce a peer's data straight
// from that peer's device memory, as NCCL's P2P transport does between threads. Access is
// enabled both ways for every pair once, as each device gets its port (as frameworks do at
// start-up), so no call pays for it. A pair the hardware cannot connect is named when a
// kernel would cross it, not left to fault on the device.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"

namespace mimatrix::device {

/// @par Thread Safety
/// Every member may be called from any thread.
class peer_access {
 public:
  /// What the runtime offers (CUDA: cudaDeviceCanAccessPeer, cudaDeviceEnablePeerAccess).
  struct backend {
    std::function<bool(int from, int to)> can_access;
    std::function<void(int from, int to)> enable;  // from's kernels may then read to's memory
  };

  explicit peer_access(backend b) : backend_(std::move(b)) {}

  /// Device `d` has a port now: access is enabled both ways with every device that joined
  /// before it, where the hardware allows. Joining again changes nothing.
  void join(int d) {
    std::lock_guard lock(mutex_);
    if (std::find(devices_.begin(), devices_.end(), d) != devices_.end()) return;
    for (const int other : devices_)
      for (const auto& [from, to] : {std::pair{d, other}, std::pair{other, d}}) {
        if (backend_.can_access(from, to))
          backend_.enable(from, to);
        else
          missing_.insert({from, to});
      }
    devices_.push_back(d);
    complete_ = missing_.empty();
  }

  /// Whether every joined device reads every other's memory: then no operand needs looking at.
  bool complete() const { return complete_.load(std::memory_order_relaxed); }

  /// Throws invalid_argument, naming both devices and `what`, where the kernels of `from`
  /// cannot read the memory of `to`.
  void check(int from, int to, std::string_view what) const {
    if (from == to) return;
    std::lock_guard lock(mutex_);
    if (!missing_.count({from, to})) return;
    throw error(errc::invalid_argument,
                "device::peer_access: a " + std::string(what) + " on GPU " + std::to_string(from) +
                    " would read memory of GPU " + std::to_string(to) +
                    ", which it cannot reach (cudaDeviceCanAccessPeer says no: no NVLink or PCIe peer path); "
                    "give ranks on GPUs without a peer path to each other a transport between processes");
  }

 private:
  backend backend_;
  mutable std::mutex mutex_;
  std::vector<int> devices_;
  std::set<std::pair<int, int>> missing_;  // (from, to) without access
  std::atomic<bool> complete_{true};
};

}  // namespace mimatrix::device
