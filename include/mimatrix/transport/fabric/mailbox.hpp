// Shared-memory mailboxes between the ranks of one host: a ring of small slots for each
// ordered pair, so that small messages skip the provider (OpenMPI vader's "fast boxes").
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mimatrix/bootstrap/detail/fd.hpp"
#include "mimatrix/bootstrap/rendezvous.hpp"
#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/core/error.hpp"

namespace mimatrix::transport::detail {

/// The inbound mailboxes of one rank and its way into its local peers' mailboxes.
///
/// Each rank owns one POSIX shared-memory segment holding a ring for every rank of its
/// host (layout [from local rank][slot]); a peer sends by writing into the ring for it in
/// the receiver's segment. A ring has one producer (the sender) and one consumer (the
/// receiver) and no locks: each slot's 16-bit stamp, 0 when the slot is free, hands the
/// slot over. The sender writes tag, data, length and payload, then release-stores the
/// stamp (its message counter, never 0); the receiver acquire-loads it, copies out, then
/// release-stores 0. The stamps of a ring share one cache line, so a receiver's scan
/// reads that line and the first line of each full slot (its tag); the stamps also order
/// messages of equal tag, which are received in the order they were sent.
///
/// Rendezvous keys, under `prefix`: `mailbox/host/<rank>` (all-gathered host identity),
/// `mailbox/segment/<rank>` (the segment's name, set once it exists; local ranks only),
/// `mailbox/mapped/<lowest local rank>` (a barrier of the host's ranks).
///
/// @par Thread Safety
/// One thread at a time per object. Ranks in one process (threads as ranks) share one
/// mapping of each segment.
class local_mailboxes {
 public:
  static constexpr std::size_t payload_bytes = 512;  // largest message a slot carries
  static constexpr std::size_t slots = 32;           // per ordered pair (sender -> receiver)

  /// Collective over all `size` ranks (each calls it with the same `prefix`): finds the
  /// ranks sharing this host, creates this rank's inbound segment, maps every local
  /// peer's, waits for the host's ranks, then unlinks its own name, so nothing stays in
  /// /dev/shm even if a rank is killed later. `host_identity` replaces the detected one
  /// (hostname, boot id and /dev/shm's device: ranks that share all three can share
  /// memory); tests use it to place ranks on other hosts. Throws errc::transport naming
  /// the rank, the peer and the failing call; errc::timeout when a rank does not come
  /// within `timeout` (for the whole construction).
  local_mailboxes(int rank, int size, bootstrap::store& store, const std::string& prefix,
                  std::chrono::milliseconds timeout, std::string host_identity = {})
      : rank_(rank), size_(size), local_index_(static_cast<std::size_t>(std::max(size, 0)), -1) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const auto left = [&] {
      return std::max(std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
                      std::chrono::milliseconds(0));
    };
    if (host_identity.empty()) host_identity = detect_host_identity();
    const auto hosts = bootstrap::all_gather(store, prefix + "mailbox/host", rank, size, to_bytes(host_identity), timeout);
    for (int r = 0; r < size; ++r) {
      if (to_string(hosts[std::size_t(r)]) != host_identity) continue;
      local_index_[std::size_t(r)] = static_cast<int>(locals_.size());
      locals_.push_back(r);
    }
    if (locals_.size() < 2) return;  // nobody to share memory with
    try {
      create_own_segment(prefix);
      store.set(prefix + "mailbox/segment/" + std::to_string(rank), to_bytes(own_name_));
      const std::size_t me = std::size_t(local_index_[std::size_t(rank)]);
      inbound_.resize(locals_.size());
      outbound_.resize(locals_.size());
      for (std::size_t i = 0; i < locals_.size(); ++i) {
        inbound_[i] = ring_at(segments_[0]->base, i);
        if (i == me) continue;
        const int peer = locals_[i];
        // A name is published once its segment exists: waiting for it is the first barrier.
        const auto name = to_string(store.get(prefix + "mailbox/segment/" + std::to_string(peer), left()));
        segments_.push_back(map_segment(name, peer));
        outbound_[i].to = ring_at(segments_.back()->base, me);
      }
      bootstrap::barrier(store, prefix + "mailbox/mapped/" + std::to_string(locals_[0]), int(locals_.size()), left());
      unlink_own();
    } catch (...) {
      unlink_own();
      throw;
    }
  }
  local_mailboxes(const local_mailboxes&) = delete;
  local_mailboxes& operator=(const local_mailboxes&) = delete;

  ~local_mailboxes() { unlink_own(); }  // the segments unmap with their last user

  int rank() const { return rank_; }
  /// The ranks on this host, this one included, in rank order.
  const std::vector<int>& local_ranks() const { return locals_; }

  /// Whether `peer` is another rank on this host.
  bool reaches(int peer) const {
    return peer != rank_ && peer >= 0 && peer < size_ && local_index_[std::size_t(peer)] >= 0;
  }

  /// Copies `bytes` (at most payload_bytes) into a free slot of the ring to `peer`, with a
  /// match tag and 64 bits of immediate data. False when the ring is full: retry later.
  [[nodiscard]] bool try_send(int peer, std::uint64_t tag, std::uint64_t data, const void* src, std::size_t bytes) {
    if (!reaches(peer) || bytes > payload_bytes)
      throw error(errc::invalid_argument,
                  describe({.rank = rank_, .peer = peer, .operation = "mailbox send", .bytes = std::int64_t(bytes)},
                           reaches(peer) ? "more than the " + std::to_string(payload_bytes) + " bytes a slot holds"
                                         : "the peer is not on this host"));
    sender& out = outbound_[std::size_t(local_index_[std::size_t(peer)])];
    ring& r = *out.to;
    // Round-robin first: with a consumer keeping up, the next slot is the free one.
    std::size_t i = out.cursor;
    if (r.stamp[i].load(std::memory_order_acquire) != 0) {
      std::size_t k = 1;
      for (; k < slots; ++k)
        if (r.stamp[(i + k) % slots].load(std::memory_order_acquire) == 0) break;
      if (k == slots) return false;
      i = (i + k) % slots;
    }
    r.slot[i].tag = tag;
    r.slot[i].data = data;
    r.slot[i].bytes = bytes;
    if (bytes) std::memcpy(r.slot[i].payload, src, bytes);
    r.stamp[i].store(out.next, std::memory_order_release);
    out.next = static_cast<std::uint16_t>(out.next + 1 == 0x10000 ? 1 : out.next + 1);
    out.cursor = (i + 1) % slots;
    return true;
  }

  /// Takes the earliest message from `peer` whose tag is `tag`, in whatever order messages
  /// of other tags arrived: copies at most `capacity` bytes of it into `dst`, sets
  /// `*bytes` to the length sent (more than `capacity` means truncated) and `*data`, and
  /// frees its slot. False when there is none yet.
  [[nodiscard]] bool try_receive(int peer, std::uint64_t tag, void* dst, std::size_t capacity, std::size_t* bytes,
                                 std::uint64_t* data) {
    if (!reaches(peer))
      throw error(errc::invalid_argument,
                  describe({.rank = rank_, .peer = peer, .operation = "mailbox receive"}, "the peer is not on this host"));
    ring& r = *inbound_[std::size_t(local_index_[std::size_t(peer)])];
    // A scan is no snapshot: a slot it found free may be filled, while it goes on, with a
    // message older than the one it picks. Once the pick's stamp is acquired every older
    // message is visible, so only the slots found free before the pick need a second look.
    slot_mask free_before = 0;
    auto [best, best_stamp] = earliest(r, tag, all_slots, &free_before);
    if (best < slots)
      if (const slot_mask again = free_before & ((slot_mask{1} << best) - 1)) {
        const auto [older, older_stamp] = earliest(r, tag, again, nullptr);
        if (older < slots && stamp_before(older_stamp, best_stamp)) best = older;
      }
    if (best == slots) return false;
    const slot_type& m = r.slot[best];
    const std::size_t sent = static_cast<std::size_t>(m.bytes);
    *bytes = sent;
    *data = m.data;
    // The length comes from another process: never copy past the slot.
    if (const std::size_t n = std::min({sent, capacity, payload_bytes}); n) std::memcpy(dst, m.payload, n);
    r.stamp[best].store(0, std::memory_order_release);
    return true;
  }

  /// Frees every message waiting from `peer` (every local peer when `peer` < 0) whose tag
  /// satisfies `pred(tag)`, so that a failed call's late messages do not fill the rings.
  /// Returns how many it freed.
  template <class Pred>
  std::size_t discard_if(int peer, Pred pred) {
    std::size_t freed = 0;
    for (std::size_t i = 0; i < inbound_.size(); ++i) {
      const int from = locals_[i];
      if (from == rank_ || (peer >= 0 && from != peer)) continue;
      ring& r = *inbound_[i];
      for (std::size_t k = 0; k < slots; ++k) {
        if (r.stamp[k].load(std::memory_order_acquire) == 0 || !pred(r.slot[k].tag)) continue;
        r.stamp[k].store(0, std::memory_order_release);
        ++freed;
      }
    }
    return freed;
  }

  /// This host's identity: ranks whose identities are equal can share memory. The boot id
  /// tells apart machines that share a hostname; /dev/shm's device tells apart containers
  /// that share a kernel but not their shared memory.
  static std::string detect_host_identity() {
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
  // The header shares the payload's first cache line: an 8-byte message is one line.
  struct alignas(64) slot_type {
    std::uint64_t tag;
    std::uint64_t data;
    std::uint64_t bytes;
    std::byte payload[payload_bytes];
  };
  struct alignas(64) ring {
    std::atomic<std::uint16_t> stamp[slots];  // 0: free; else the sender's message counter
    slot_type slot[slots];
  };
  static_assert(std::atomic<std::uint16_t>::is_always_lock_free,
                "Shared-memory mailboxes need lock-free (address-free) 16-bit atomics.");
  static_assert(sizeof(ring::stamp) <= 64, "A ring's stamps should fit one cache line.");
  static_assert(payload_bytes % 64 == 0 && sizeof(ring) % 64 == 0);

  static constexpr std::uint64_t magic = 0x6d696d6174726978;  // "mimatrix"
  struct alignas(64) segment_header {
    std::uint64_t magic;
    std::uint64_t rings;
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

  using slot_mask = std::uint64_t;
  static_assert(slots <= 64, "A slot_mask holds one bit a slot.");
  static constexpr slot_mask all_slots = slots == 64 ? ~slot_mask{0} : (slot_mask{1} << slots) - 1;

  /// Stamps wrap: the signed difference orders them unless a message has waited behind
  /// 2^15 later ones.
  static bool stamp_before(std::uint16_t a, std::uint16_t b) { return std::int16_t(std::uint16_t(a - b)) < 0; }

  /// The slot among `which` holding the earliest message with `tag` (slots when none) and
  /// its stamp, scanning in index order; adds the slots found free to `*free_seen`.
  static std::pair<std::size_t, std::uint16_t> earliest(ring& r, std::uint64_t tag, slot_mask which,
                                                        slot_mask* free_seen) {
    std::size_t best = slots;
    std::uint16_t best_stamp = 0;
    for (; which; which &= which - 1) {
      const auto i = static_cast<std::size_t>(std::countr_zero(which));
      const std::uint16_t s = r.stamp[i].load(std::memory_order_acquire);
      if (s == 0) {
        if (free_seen) *free_seen |= slot_mask{1} << i;
      } else if (r.slot[i].tag == tag && (best == slots || stamp_before(s, best_stamp))) {
        best = i;
        best_stamp = s;
      }
    }
    return {best, best_stamp};
  }

  struct sender {
    ring* to = nullptr;
    std::size_t cursor = 0;
    std::uint16_t next = 1;
  };

  static std::size_t segment_bytes(std::size_t rings) { return sizeof(segment_header) + rings * sizeof(ring); }
  static ring* ring_at(std::byte* base, std::size_t index) {
    return reinterpret_cast<ring*>(base + sizeof(segment_header) + index * sizeof(ring));
  }

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
    const std::size_t bytes = segment_bytes(locals_.size());
    bootstrap::detail::unique_fd fd;
    for (int attempt = 0; !fd; ++attempt) {
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(nonce()));
      own_name_ = "/mimatrix-mb-" + readable + "-r" + std::to_string(rank_) + "-" + hex;
      fd.reset(::shm_open(own_name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (!fd && (errno != EEXIST || attempt == 3)) fail(-1, "shm_open('" + own_name_ + "')", errno);
    }
    created_ = true;
    if (::ftruncate(fd.get(), off_t(bytes)) != 0) fail(-1, "ftruncate('" + own_name_ + "', " + std::to_string(bytes) + ")", errno);
    // Reserve the pages now: a full /dev/shm then fails here, not with SIGBUS on first touch.
    if (const int e = ::posix_fallocate(fd.get(), 0, off_t(bytes)); e != 0)
      fail(-1, "posix_fallocate('" + own_name_ + "', " + std::to_string(bytes) + ")", e);
    auto m = map_fd(fd.get(), own_name_, bytes, -1);
    new (m->base) segment_header{magic, locals_.size()};
    for (std::size_t i = 0; i < locals_.size(); ++i) new (ring_at(m->base, i)) ring;  // stamps 0: all free
    segments_.push_back(std::move(m));
  }

  std::shared_ptr<mapping> map_segment(const std::string& name, int peer) {
    {
      std::lock_guard lock(registry().mutex);
      if (auto it = registry().segments.find(name); it != registry().segments.end())
        if (auto shared = it->second.lock()) return shared;
    }
    bootstrap::detail::unique_fd fd(::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
    if (!fd) fail(peer, "shm_open('" + name + "')", errno);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) fail(peer, "fstat('" + name + "')", errno);
    const std::size_t bytes = segment_bytes(locals_.size());
    if (std::size_t(st.st_size) != bytes)
      throw error(errc::transport, describe({.rank = rank_, .peer = peer, .operation = "local mailboxes"},
                                            "segment '" + name + "' holds " + std::to_string(st.st_size) +
                                                " bytes, not the " + std::to_string(bytes) + " of " +
                                                std::to_string(locals_.size()) + " rings: the ranks disagree on who shares this host"));
    auto m = map_fd(fd.get(), name, bytes, peer);
    const auto* header = reinterpret_cast<const segment_header*>(m->base);
    if (header->magic != magic || header->rings != locals_.size())
      throw error(errc::transport, describe({.rank = rank_, .peer = peer, .operation = "local mailboxes"},
                                            "segment '" + name + "' is not a mailbox segment of " +
                                                std::to_string(locals_.size()) + " rings"));
    return m;
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

  static std::vector<std::byte> to_bytes(const std::string& s) {
    std::vector<std::byte> v(s.size());
    if (!s.empty()) std::memcpy(v.data(), s.data(), s.size());
    return v;
  }
  static std::string to_string(const std::vector<std::byte>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size());
  }

  int rank_, size_;
  std::vector<int> local_index_;  // per rank: its index among this host's ranks, or -1
  std::vector<int> locals_;       // this host's ranks, in rank order
  std::vector<std::shared_ptr<mapping>> segments_;  // [0]: this rank's own
  std::vector<ring*> inbound_;    // per local index: the ring from that rank, in our segment
  std::vector<sender> outbound_;  // per local index: the ring to that rank, in its segment
  std::string own_name_;
  bool created_ = false;
};

}  // namespace mimatrix::transport::detail
