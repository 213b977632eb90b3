// The RMA window: memory every peer may write into with fi_writedata, registered once
// and announced through the store at start-up, so one-sided steps run as real RMA
// writes with no per-call key exchange. It has two halves: consecutive one-sided calls
// alternate between them, so a peer already in the next call never writes into memory
// this rank still reads.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/transport/fabric/error.hpp"

namespace mimatrix::transport::detail::fabric {

/// What a rank tells its peers about its window (exchanged as raw bytes).
struct window_announcement {
  std::uint64_t address = 0;  // what a peer passes as the remote address of byte 0
  std::uint64_t key = 0;
  std::uint64_t half_bytes = 0;  // 0: this rank has no window
};

class rma_window {
 public:
  /// Maps 2 * `half_bytes` of memory (committed only when touched) and registers it for
  /// remote writes. `virtual_addressing`: the provider addresses remote memory by the
  /// target's virtual address (FI_MR_VIRT_ADDR) instead of an offset.
  rma_window(fid_domain* domain, const std::string& provider, int rank, std::size_t half_bytes,
             bool virtual_addressing, bool provider_keys)
      : half_bytes_(round_up(half_bytes)), virtual_addressing_(virtual_addressing) {
    void* p = ::mmap(nullptr, 2 * half_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (p == MAP_FAILED)
      throw error(errc::transport, "rank " + std::to_string(rank) + ": transport::fabric: mmap of a " +
                                       std::to_string(2 * half_bytes_) + "-byte RMA window failed: " +
                                       std::strerror(errno) + " (set MIMATRIX_WINDOW_BYTES lower, or 0)");
    base_ = static_cast<std::byte*>(p);
    try {
      // A fixed key outside the registration cache's range (it counts up from 1).
      check_fabric_call(fi_mr_reg(domain, base_, 2 * half_bytes_, FI_REMOTE_WRITE | FI_WRITE | FI_SEND | FI_RECV, 0,
                                  window_key, 0, &mr_, nullptr),
                        "fi_mr_reg(window)", provider, {rank});
    } catch (...) {
      ::munmap(base_, 2 * half_bytes_);
      throw;
    }
    key_ = provider_keys ? fi_mr_key(mr_) : window_key;
  }
  rma_window(const rma_window&) = delete;
  rma_window& operator=(const rma_window&) = delete;
  ~rma_window() {
    if (mr_) fi_close(&mr_->fid);
    ::munmap(base_, 2 * half_bytes_);
  }

  window_announcement announcement() const {
    return {virtual_addressing_ ? reinterpret_cast<std::uint64_t>(base_) : 0, key_, half_bytes_};
  }

  std::byte* half(std::size_t index) { return base_ + (index & 1) * half_bytes_; }
  void* descriptor() const { return fi_mr_desc(mr_); }
  /// Whether [p, p + bytes) lies in the window.
  bool holds(const void* p, std::size_t bytes) const {
    const auto* b = static_cast<const std::byte*>(p);
    return b >= base_ && b + bytes <= base_ + 2 * half_bytes_;
  }

  /// Where byte `offset` of half `index` of `peer`'s window is, for fi_writedata.
  static std::uint64_t remote_address(const window_announcement& peer, std::size_t index, std::size_t offset) {
    return peer.address + (index & 1) * peer.half_bytes + offset;
  }

 private:
  static constexpr std::uint64_t window_key = std::uint64_t(1) << 40;

  static std::size_t round_up(std::size_t n) {
    constexpr std::size_t page = 4096;
    return (n + page - 1) / page * page;
  }

  std::size_t half_bytes_;
  bool virtual_addressing_;
  std::byte* base_ = nullptr;
  fid_mr* mr_ = nullptr;
  std::uint64_t key_ = 0;
};

}  // namespace mimatrix::transport::detail::fabric
