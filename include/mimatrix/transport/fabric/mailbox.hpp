// Shared-memory mailboxes between the ranks of one host: a ring of small slots for each
// ordered pair, so that small messages skip the provider (OpenMPI vader's "fast boxes").
#pragma once

#include <algorithm>
#include <atomic>
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
/// receiver), no locks, and is strictly first in, first out, like OpenMPI vader's fast
/// boxes: message k goes to slot k mod `slots`, whose sequence word (0 when free) shares
/// a cache line with the header and the first 32 payload bytes, so a small message moves
/// one line and a receiver polls one line. The sender writes header and payload, then
/// release-stores k + 1; the receiver acquire-loads the word of the slot it expects next,
/// copies out, then release-stores 0. Receives are by tag: messages of other tags that
/// stand ahead of the one wanted move to this rank's own memory (the unexpected queue of
/// MPI implementations), so that equal tags are taken in send order and a ring never
/// stays blocked by a message nobody asks for yet.
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
        inbound_[i].from = ring_at(segments_[0]->base, i);
        inbound_[i].unexpected.reserve(slots);
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

  /// Copies `bytes` (at most payload_bytes) into the next slot of the ring to `peer`, with
  /// a match tag and 64 bits of immediate data. False when that slot is still taken (the
  /// ring is full): retry later.
  [[nodiscard]] bool try_send(int peer, std::uint64_t tag, std::uint64_t data, const void* src, std::size_t bytes) {
    if (!reaches(peer) || bytes > payload_bytes)
      throw error(errc::invalid_argument,
                  describe({.rank = rank_, .peer = peer, .operation = "mailbox send", .bytes = std::int64_t(bytes)},
                           reaches(peer) ? "more than the " + std::to_string(payload_bytes) + " bytes a slot holds"
                                         : "the peer is not on this host"));
    sender& out = outbound_[std::size_t(local_index_[std::size_t(peer)])];
    slot_type& slot = out.to->slot[out.sent % slots];
    if (slot.sequence.load(std::memory_order_acquire) != 0) return false;
    slot.tag = tag;
    slot.data = data;
    slot.bytes = bytes;
    if (bytes) std::memcpy(slot.payload, src, bytes);
    slot.sequence.store(++out.sent, std::memory_order_release);
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
    receiver& in = inbound_[std::size_t(local_index_[std::size_t(peer)])];
    // Messages set aside earlier came before any still in the ring.
    for (auto it = in.unexpected.begin(); it != in.unexpected.end(); ++it)
      if (it->tag == tag) {
        deliver(it->bytes, it->data, it->payload, dst, capacity, bytes, data);
        in.unexpected.erase(it);
        return true;
      }
    // At most one ring's worth a call, so that a fast sender cannot keep it here.
    for (std::size_t k = 0; k < slots; ++k) {
      slot_type* slot = arrived(in, peer);
      if (!slot) return false;
      if (slot->tag == tag) {
        deliver(slot->bytes, slot->data, slot->payload, dst, capacity, bytes, data);
        release(in, *slot);
        return true;
      }
      set_aside(in, *slot);
    }
    return false;
  }

  /// Frees every message waiting from `peer` (every local peer when `peer` < 0) whose tag
  /// satisfies `pred(tag)`, so that a failed call's late messages do not fill the rings.
  /// Empties those rings (the other messages are kept, in order, in this rank's memory).
  /// Returns how many it freed.
  template <class Pred>
  std::size_t discard_if(int peer, Pred pred) {
    std::size_t freed = 0;
    for (std::size_t i = 0; i < inbound_.size(); ++i) {
      const int from = locals_[i];
      if (from == rank_ || (peer >= 0 && from != peer)) continue;
      receiver& in = inbound_[i];
      while (slot_type* slot = arrived(in, from)) set_aside(in, *slot);
      const auto before = in.unexpected.size();
      std::erase_if(in.unexpected, [&](const held& m) { return pred(m.tag); });
      freed += before - in.unexpected.size();
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
  // The sequence word and header share the payload's first cache line: a message of up
  // to 32 bytes is one line.
  struct alignas(64) slot_type {
    std::atomic<std::uint64_t> sequence;  // 0: free; else the message's number, from 1
    std::uint64_t tag;
    std::uint64_t data;
    std::uint64_t bytes;
    std::byte payload[payload_bytes];
  };
  struct ring {
    slot_type slot[slots];
  };
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
                "Shared-memory mailboxes need lock-free (address-free) 64-bit atomics.");
  static_assert(offsetof(slot_type, payload) == 32, "A slot's first line should hold 32 payload bytes.");
  static_assert(payload_bytes % 64 == 0 && sizeof(ring) % 64 == 0);

  /// A message taken out of the ring ahead of its receive.
  struct held {
    std::uint64_t tag, data, bytes;
    std::byte payload[payload_bytes];
  };

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

  struct sender {
    ring* to = nullptr;
    std::uint64_t sent = 0;  // messages sent: the next goes to slot sent % slots
  };
  struct receiver {
    ring* from = nullptr;
    std::uint64_t taken = 0;     // messages taken out of the ring
    std::vector<held> unexpected;  // in arrival order
  };

  /// The next message of `in`'s ring, or null when it has not arrived.
  slot_type* arrived(receiver& in, int peer) const {
    slot_type& slot = in.from->slot[in.taken % slots];
    const std::uint64_t s = slot.sequence.load(std::memory_order_acquire);
    if (s == 0) return nullptr;
    if (s != in.taken + 1)  // only a foreign write into the segment gets here
      throw error(errc::transport, describe({.rank = rank_, .peer = peer, .operation = "mailbox receive"},
                                            "slot " + std::to_string(in.taken % slots) + " holds message " +
                                                std::to_string(s) + " where " + std::to_string(in.taken + 1) +
                                                " was expected: the shared ring is corrupt"));
    return &slot;
  }

  static void release(receiver& in, slot_type& slot) {
    slot.sequence.store(0, std::memory_order_release);
    ++in.taken;
  }

  static void set_aside(receiver& in, slot_type& slot) {
    held& m = in.unexpected.emplace_back();
    m.tag = slot.tag;
    m.data = slot.data;
    m.bytes = slot.bytes;
    if (const std::size_t n = std::min<std::size_t>(m.bytes, payload_bytes)) std::memcpy(m.payload, slot.payload, n);
    release(in, slot);
  }

  /// Hands a message to the caller. The length comes from another process: never copy
  /// past a slot.
  static void deliver(std::uint64_t sent, std::uint64_t data, const std::byte* payload, void* dst, std::size_t capacity,
                      std::size_t* bytes, std::uint64_t* data_out) {
    *bytes = static_cast<std::size_t>(sent);
    *data_out = data;
    if (const std::size_t n = std::min({static_cast<std::size_t>(sent), capacity, payload_bytes}))
      std::memcpy(dst, payload, n);
  }

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
    for (std::size_t i = 0; i < locals_.size(); ++i) new (ring_at(m->base, i)) ring;  // sequences 0: all free
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
  std::vector<receiver> inbound_;  // per local index: the ring from that rank, in our segment
  std::vector<sender> outbound_;  // per local index: the ring to that rank, in its segment
  std::string own_name_;
  bool created_ = false;
};

}  // namespace mimatrix::transport::detail
