// The ranks of one host, and one POSIX shared-memory segment a rank that all of them map:
// the memory the mailboxes (mailbox.hpp) keep their rings in.
#pragma once

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mimatrix/bootstrap/detail/fd.hpp"
#include "mimatrix/bootstrap/rendezvous.hpp"
#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/core/error.hpp"

namespace mimatrix::transport::detail::fabric {

/// This rank's inbound segment and its way into each local peer's.
///
/// Every rank of a host owns one segment holding a region of `region_bytes` for every
/// rank of the host (its own included, unused): region i of rank r's segment is where
/// local rank i writes to r. Construction is collective over all ranks: it finds the
/// ranks sharing this host, creates this rank's segment, maps every local peer's, waits
/// for the host's ranks, then unlinks its own name, so nothing stays in /dev/shm even if
/// a rank is killed later. A segment's header records its `layout` (what the regions
/// hold), so ranks that disagree on it fail instead of misreading each other.
///
/// Rendezvous keys, under `prefix`: `mailbox/host/<rank>` (all-gathered host identity),
/// `mailbox/segment/<rank>` (the segment's name, set once it exists; local ranks only),
/// `mailbox/mapped/<lowest local rank>` (a barrier of the host's ranks). Names in
/// /dev/shm start with "mimatrix-mb-", then a readable part of the prefix.
///
/// @par Thread Safety
/// Immutable after construction. Ranks in one process (threads as ranks) share one
/// mapping of each segment.
class host_segments {
 public:
  /// `host_identity` replaces the detected one (hostname, boot id and /dev/shm's device:
  /// ranks that share all three can share memory); tests use it to place ranks on other
  /// hosts. Throws errc::transport naming the rank, the peer and the failing call;
  /// errc::timeout when a rank does not come within `timeout` (for the whole construction).
  host_segments(int rank, int size, bootstrap::store& store, const std::string& prefix,
                std::chrono::milliseconds timeout, std::size_t region_bytes, std::uint64_t layout,
                std::string host_identity = {})
      : rank_(rank), size_(size), region_bytes_(region_bytes), layout_(layout),
        local_index_(static_cast<std::size_t>(std::max(size, 0)), -1) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const auto left = [&] {
      return std::max(std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
                      std::chrono::milliseconds(0));
    };
    if (host_identity.empty()) host_identity = detect_host_identity();
    const auto hosts = bootstrap::all_gather(store, prefix + "mailbox/host", rank, size, bootstrap::bytes_of(host_identity), timeout);
    for (int r = 0; r < size; ++r) {
      if (bootstrap::text_of(hosts[std::size_t(r)]) != host_identity) continue;
      local_index_[std::size_t(r)] = static_cast<int>(locals_.size());
      locals_.push_back(r);
    }
    if (locals_.size() < 2) return;  // nobody to share memory with
    try {
      create_own_segment(prefix);
      store.set(prefix + "mailbox/segment/" + std::to_string(rank), bootstrap::bytes_of(own_name_));
      const std::size_t me = local_index(rank);
      outbound_.assign(locals_.size(), nullptr);
      for (std::size_t i = 0; i < locals_.size(); ++i) {
        if (i == me) continue;
        const int peer = locals_[i];
        // A name is published once its segment exists: waiting for it is the first barrier.
        const auto name = bootstrap::text_of(store.get(prefix + "mailbox/segment/" + std::to_string(peer), left()));
        segments_.push_back(map_segment(name, peer));
        outbound_[i] = region_at(segments_.back()->base, me);
      }
      bootstrap::barrier(store, prefix + "mailbox/mapped/" + std::to_string(locals_[0]), int(locals_.size()), left());
      unlink_own();
    } catch (...) {
      unlink_own();
      throw;
    }
  }
  host_segments(const host_segments&) = delete;
  host_segments& operator=(const host_segments&) = delete;

  ~host_segments() { unlink_own(); }  // the segments unmap with their last user

  int rank() const { return rank_; }
  /// The ranks on this host, this one included, in rank order.
  const std::vector<int>& local_ranks() const { return locals_; }

  /// Whether `peer` is another rank on this host.
  bool reaches(int peer) const {
    return peer != rank_ && peer >= 0 && peer < size_ && local_index_[std::size_t(peer)] >= 0;
  }
  /// `rank`'s index among this host's ranks; `rank` is this one or a peer it reaches.
  std::size_t local_index(int rank) const { return static_cast<std::size_t>(local_index_[std::size_t(rank)]); }

  /// The region the local rank with index `i` writes to this rank in (none: null).
  std::byte* inbound(std::size_t i) const { return segments_.empty() ? nullptr : region_at(segments_[0]->base, i); }
  /// The region this rank writes to the local rank with index `i` in.
  std::byte* outbound(std::size_t i) const { return outbound_[i]; }

  /// This host's identity: ranks whose identities are equal can share memory. The boot id
  /// tells apart machines that share a hostname; /dev/shm's device tells apart containers
  /// that share a kernel but not their shared memory. MIMATRIX_HOST_ID replaces it (as
  /// NCCL_HOSTID does): ranks given one id must share /dev/shm; ranks of one machine given
  /// different ids act as ranks of different hosts (tests of jobs across hosts).
  static std::string detect_host_identity() {
    if (const char* given = std::getenv("MIMATRIX_HOST_ID"); given && *given) return std::string("id:") + given;
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::string id = host;
    std::ifstream boot("/proc/sys/kernel/random/boot_id");
    std::string boot_id;
    std::getline(boot, boot_id);
    id += " boot:" + boot_id;
    struct stat st {};
    if (::stat("/dev/shm", &st) == 0)
      id += " shm:" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
    else  // no /dev/shm, no sharing: an identity nobody else has
      id += " alone:" + std::to_string(::getpid()) + ":" + std::to_string(nonce());
    return id;
  }

 private:
  static constexpr std::uint64_t magic = 0x6d696d6174726978;  // "mimatrix"
  struct alignas(64) segment_header {
    std::uint64_t magic;
    std::uint64_t regions;
    std::uint64_t region_bytes;
    std::uint64_t layout;
  };

  /// One mapping of a segment, shared by the ranks of this process that use it.
  struct mapping {
    std::string name;
    std::byte* base = nullptr;
    std::size_t bytes = 0;
    ~mapping() {
      {
        std::lock_guard lock(registry().mutex);
        if (auto it = registry().segments.find(name); it != registry().segments.end() && it->second.expired())
          registry().segments.erase(it);
      }
      ::munmap(base, bytes);
    }
  };
  // Threads as ranks map each segment once: fewer mappings, and ThreadSanitizer, which
  // tracks virtual addresses, sees the rings' synchronization.
  struct mapping_registry {
    std::mutex mutex;
    std::map<std::string, std::weak_ptr<mapping>> segments;
  };
  static mapping_registry& registry() {
    static mapping_registry instance;
    return instance;
  }

  std::size_t segment_bytes() const { return sizeof(segment_header) + locals_.size() * region_bytes_; }
  std::byte* region_at(std::byte* base, std::size_t i) const { return base + sizeof(segment_header) + i * region_bytes_; }

  static std::uint64_t nonce() {
    std::random_device device;
    const std::uint64_t r = (std::uint64_t(device()) << 32) ^ device();
    return r ^ (std::uint64_t(::getpid()) << 20) ^
           std::uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  }

  [[noreturn]] void fail(int peer, const std::string& call, int e) const {
    throw error(errc::transport, describe({.rank = rank_, .peer = peer, .operation = "local mailboxes"},
                                          call + " failed: " + bootstrap::detail::errno_text(e)));
  }

  void create_own_segment(const std::string& prefix) {
    // The prefix may hold '/' and more; keep a readable, name-safe part of it.
    std::string readable;
    for (char c : prefix.substr(0, 64))
      readable += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
    const std::size_t bytes = segment_bytes();
    bootstrap::detail::unique_fd fd;
    for (int attempt = 0; !fd; ++attempt) {
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(nonce()));
      // The pid lets a launcher remove it should this process die before unlinking it.
      own_name_ = "/mimatrix-mb-" + readable + "-r" + std::to_string(rank_) + "-p" + std::to_string(::getpid()) + "-" +
                  hex;
      fd.reset(::shm_open(own_name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (!fd && (errno != EEXIST || attempt == 3)) fail(-1, "shm_open('" + own_name_ + "')", errno);
    }
    created_ = true;
    if (::ftruncate(fd.get(), off_t(bytes)) != 0) fail(-1, "ftruncate('" + own_name_ + "', " + std::to_string(bytes) + ")", errno);
    // Reserve the pages now: a full /dev/shm then fails here, not with SIGBUS on first touch.
    if (const int e = ::posix_fallocate(fd.get(), 0, off_t(bytes)); e != 0)
      fail(-1, "posix_fallocate('" + own_name_ + "', " + std::to_string(bytes) + ")", e);
    auto m = map_fd(fd.get(), own_name_, bytes, -1);
    // The pages are zero: every region starts empty.
    new (m->base) segment_header{magic, locals_.size(), region_bytes_, layout_};
    segments_.push_back(std::move(m));
  }

  /// Maps a peer's segment (once a process) and checks that it is laid out as this
  /// rank's: threads as ranks share the mapping, so the check runs on every lookup.
  std::shared_ptr<mapping> map_segment(const std::string& name, int peer) {
    std::shared_ptr<mapping> m;
    {
      std::lock_guard lock(registry().mutex);
      if (auto it = registry().segments.find(name); it != registry().segments.end()) m = it->second.lock();
    }
    if (!m) {
      bootstrap::detail::unique_fd fd(::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
      if (!fd) fail(peer, "shm_open('" + name + "')", errno);
      struct stat st {};
      if (::fstat(fd.get(), &st) != 0) fail(peer, "fstat('" + name + "')", errno);
      if (std::size_t(st.st_size) != segment_bytes()) disagree(name, peer, std::size_t(st.st_size));
      m = map_fd(fd.get(), name, segment_bytes(), peer);
    }
    if (m->bytes != segment_bytes()) disagree(name, peer, m->bytes);
    const auto* header = reinterpret_cast<const segment_header*>(m->base);
    if (header->magic != magic || header->regions != locals_.size() || header->region_bytes != region_bytes_ ||
        header->layout != layout_)
      throw error(errc::transport, describe({.rank = rank_, .peer = peer, .operation = "local mailboxes"},
                                            "segment '" + name + "' is not a mailbox segment of " +
                                                std::to_string(locals_.size()) + " regions laid out as this rank's: "
                                                "the ranks disagree on the mailboxes' size"));
    return m;
  }

  [[noreturn]] void disagree(const std::string& name, int peer, std::size_t bytes) const {
    throw error(errc::transport, describe({.rank = rank_, .peer = peer, .operation = "local mailboxes"},
                                          "segment '" + name + "' holds " + std::to_string(bytes) + " bytes, not the " +
                                              std::to_string(segment_bytes()) + " of " + std::to_string(locals_.size()) +
                                              " regions of " + std::to_string(region_bytes_) +
                                              ": the ranks disagree on who shares this host or on the mailboxes' size"));
  }

  std::shared_ptr<mapping> map_fd(int fd, const std::string& name, std::size_t bytes, int peer) {
    void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) fail(peer, "mmap('" + name + "', " + std::to_string(bytes) + " bytes)", errno);
    auto m = std::make_shared<mapping>();
    m->name = name;
    m->base = static_cast<std::byte*>(base);
    m->bytes = bytes;
    std::lock_guard lock(registry().mutex);
    registry().segments[name] = m;
    return m;
  }

  void unlink_own() noexcept {
    if (created_) ::shm_unlink(own_name_.c_str());
    created_ = false;
  }


  int rank_, size_;
  std::size_t region_bytes_;
  std::uint64_t layout_;
  std::vector<int> local_index_;  // per rank: its index among this host's ranks, or -1
  std::vector<int> locals_;       // this host's ranks, in rank order
  std::vector<std::shared_ptr<mapping>> segments_;  // [0]: this rank's own
  std::vector<std::byte*> outbound_;  // per local index: our region in that rank's segment
  std::string own_name_;
  bool created_ = false;
};

}  // namespace mimatrix::transport::detail::fabric
