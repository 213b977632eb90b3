// Memory registrations reused across calls: providers that need local buffers
// registered (FI_MR_LOCAL: verbs, efa) pay for fi_mr_reg once per buffer, not per call.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "mimatrix/device/port.hpp"
#include "mimatrix/transport/fabric/error.hpp"

namespace mimatrix::transport::detail::fabric {

/// Registrations of host memory keyed by address range; a lookup inside a registered
/// range reuses it. Entries stay until the cache is destroyed or the application
/// forgets a range (fabric::deregister): a buffer freed and reallocated at the same
/// address would otherwise be found again while the provider still holds the old pages.
///
/// @par Thread Safety
/// Used by the one thread that drives its endpoint.
class registration_cache {
 public:
  registration_cache(fid_domain* domain, std::string provider, bool required, std::uint64_t access)
      : domain_(domain), provider_(std::move(provider)), required_(required), access_(access) {}
  registration_cache(const registration_cache&) = delete;
  registration_cache& operator=(const registration_cache&) = delete;
  ~registration_cache() { clear(); }

  /// Whether descriptors are needed at all (the provider asked for FI_MR_LOCAL, or the
  /// user asked to register always).
  bool required() const { return required_; }

  /// The descriptor to pass with [data, data + bytes), registering it on first use;
  /// nullptr when the provider needs none.
  void* descriptor(const void* data, std::size_t bytes) {
    if (!required_ || bytes == 0) return nullptr;
    const auto begin = reinterpret_cast<std::uintptr_t>(data), end = begin + bytes;
    if (void* known = find(begin, end)) return known;
    // Register whole pages: neighbouring buffers of one allocation then share an entry.
    constexpr std::uintptr_t page = 4096;
    const std::uintptr_t first = begin & ~(page - 1), last = (end + page - 1) & ~(page - 1);
    fid_mr* mr = nullptr;
    // Keys must be unique in the domain unless the provider picks them (FI_MR_PROV_KEY).
    check_fabric_call(fi_mr_reg(domain_, reinterpret_cast<void*>(first), last - first, access_, 0,
                                ++next_key_, 0, &mr, nullptr),
                      "fi_mr_reg", provider_);
    return remember(first, last, mr);
  }

  /// The descriptor to pass with device memory [data, data + bytes) that the provider
  /// moves itself (FI_HMEM), registering it on first use. Always registered (FI_MR_HMEM),
  /// exactly: a device allocation cannot be rounded out to whole pages.
  void* device_descriptor(const void* data, std::size_t bytes, device::network_memory where) {
    if (bytes == 0) return nullptr;
    const auto begin = reinterpret_cast<std::uintptr_t>(data), end = begin + bytes;
    if (void* known = find(begin, end)) return known;
    iovec region{const_cast<void*>(data), bytes};
    fi_mr_attr attr{};
    attr.mr_iov = &region;
    attr.iov_count = 1;
    attr.access = access_;
    attr.requested_key = ++next_key_;
    attr.iface = where.iface == device::network_memory::interface::cuda ? FI_HMEM_CUDA : FI_HMEM_SYSTEM;
    if (attr.iface == FI_HMEM_CUDA) attr.device.cuda = where.device;
    fid_mr* mr = nullptr;
    check_fabric_call(fi_mr_regattr(domain_, &attr, 0, &mr), "fi_mr_regattr (device memory)", provider_);
    return remember(begin, end, mr);
  }

  std::size_t registrations() const { return registrations_; }
  std::size_t hits() const { return hits_; }
  /// Registrations the cache holds now (each covers one or more buffers).
  std::size_t live() const { return entries_.size(); }

  /// Drops every registration that overlaps [data, data + bytes); the next use of those
  /// pages registers them again. Returns how many were dropped. `in_use`: a call in
  /// flight or a failed call's request may still use them, so they are closed later
  /// (`trim`), once none can.
  std::size_t forget(const void* data, std::size_t bytes, bool in_use) {
    const auto begin = reinterpret_cast<std::uintptr_t>(data), end = begin + bytes;
    std::size_t dropped = 0;
    for (auto it = entries_.begin(); it != entries_.end() && it->first < end;) {
      if (it->second.end <= begin) {
        ++it;
        continue;
      }
      retired_.push_back(it->second.mr);
      it = entries_.erase(it);
      ++dropped;
    }
    if (!in_use) trim();
    return dropped;
  }

  /// Closes the registrations set aside by `forget` or by a grown buffer; only when no
  /// request that may use them is with the provider.
  void trim() {
    for (fid_mr* mr : retired_) fi_close(&mr->fid);
    retired_.clear();
  }

  /// Releases every registration; only when nothing is in flight.
  void clear() {
    for (auto& [start, e] : entries_) fi_close(&e.mr->fid);
    entries_.clear();
    trim();
  }

 private:
  /// The descriptor of a registration that covers [begin, end), counted as a hit; null if none.
  void* find(std::uintptr_t begin, std::uintptr_t end) {
    auto it = entries_.upper_bound(begin);
    if (it == entries_.begin() || std::prev(it)->second.end < end) return nullptr;
    ++hits_;
    return fi_mr_desc(std::prev(it)->second.mr);
  }

  /// Keeps a new registration of [begin, end). A grown buffer at a known address: the
  /// older, smaller registration may still be in use by an operation in flight, so it is
  /// retired, not closed.
  void* remember(std::uintptr_t begin, std::uintptr_t end, fid_mr* mr) {
    ++registrations_;
    if (auto old = entries_.find(begin); old != entries_.end()) retired_.push_back(old->second.mr);
    entries_.insert_or_assign(begin, entry{end, mr});
    return fi_mr_desc(mr);
  }

  struct entry {
    std::uintptr_t end = 0;
    fid_mr* mr = nullptr;
  };

  fid_domain* domain_;
  std::string provider_;
  bool required_;
  std::uint64_t access_;  // FI_SEND | FI_RECV, and FI_WRITE when buffers are RMA sources
  std::map<std::uintptr_t, entry> entries_;
  std::vector<fid_mr*> retired_;
  std::size_t registrations_ = 0, hits_ = 0;
  std::uint64_t next_key_ = 0;
};

}  // namespace mimatrix::transport::detail::fabric
