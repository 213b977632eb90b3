// Shared-memory mailboxes between the ranks of one host: a first-in, first-out ring of
// slots for each ordered pair, so that messages skip the provider (OpenMPI vader's "fast
// boxes" for small ones; copy-in, reduce-out rings for chunks of large ones).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/transport/fabric/shared_segments.hpp"

namespace mimatrix::transport::detail::fabric {

/// The inbound mailboxes of one rank and its way into its local peers' mailboxes.
///
/// Each ordered pair of ranks on a host has a ring of `slots` slots of up to
/// `payload_bytes` each, in the receiver's segment (shared_segments.hpp). A ring has one
/// producer (the sender) and one consumer (the receiver), no locks, and is strictly first
/// in, first out: message k goes to slot k mod `slots`, whose sequence word (0 when free)
/// shares a cache line with the header and the first 32 payload bytes, so a small message
/// moves one line and a receiver polls one line. The sender writes header and payload,
/// then release-stores k + 1; the receiver acquire-loads the word of the slot it expects
/// next, reads, then release-stores 0.
///
/// Receives are by tag: messages of other tags that stand ahead of the one wanted move to
/// this rank's own memory (the unexpected queue of MPI implementations), so that equal
/// tags are taken in send order and a ring never stays blocked by a message nobody asks
/// for yet. try_peek/take read a message where it lies, so a reduction can read it
/// straight from the ring.
///
/// @par Thread Safety
/// One thread at a time per object. Ranks in one process (threads as ranks) share one
/// mapping of each segment.
class local_mailboxes {
 public:
  struct geometry {
    std::size_t payload_bytes;  // the largest message a slot carries
    std::size_t slots;          // per ordered pair (sender -> receiver)
  };
  /// Small messages: 32 slots of 512 bytes a pair, 18 KiB.
  static constexpr geometry small_messages{512, 32};

  /// A message read where it lies: `payload` holds its first min(bytes, payload_bytes())
  /// bytes (`bytes` is what the sender said).
  struct message {
    const std::byte* payload;
    std::size_t bytes;
    std::uint64_t data;
  };

  /// Collective over all `size` ranks, each with the same `prefix` and `shape` (see
  /// host_segments for what it throws).
  local_mailboxes(int rank, int size, bootstrap::store& store, const std::string& prefix,
                  std::chrono::milliseconds timeout, geometry shape = small_messages, std::string host_identity = {})
      : shape_(checked(shape)), stride_((header_bytes + shape_.payload_bytes + 63) / 64 * 64),
        segments_(rank, size, store, prefix, timeout, stride_ * shape_.slots, layout_of(shape_),
                  std::move(host_identity)) {
    const auto& locals = segments_.local_ranks();
    if (locals.size() < 2) return;
    inbound_.resize(locals.size());
    outbound_.resize(locals.size());
    for (std::size_t i = 0; i < locals.size(); ++i) {
      inbound_[i].from = segments_.inbound(i);
      inbound_[i].unexpected.reserve(shape_.slots);
      if (locals[i] != rank) outbound_[i].to = segments_.outbound(i);
    }
  }

  int rank() const { return segments_.rank(); }
  /// The ranks on this host, this one included, in rank order.
  const std::vector<int>& local_ranks() const { return segments_.local_ranks(); }
  /// Whether `peer` is another rank on this host.
  bool reaches(int peer) const { return segments_.reaches(peer); }
  std::size_t payload_bytes() const { return shape_.payload_bytes; }
  std::size_t slots() const { return shape_.slots; }

  /// Copies `bytes` (at most payload_bytes()) into the next slot of the ring to `peer`,
  /// with a match tag and 64 bits of immediate data. False when that slot is still taken
  /// (the ring is full): retry later.
  [[nodiscard]] bool try_send(int peer, std::uint64_t tag, std::uint64_t data, const void* src, std::size_t bytes) {
    if (!reaches(peer) || bytes > shape_.payload_bytes)
      throw error(errc::invalid_argument,
                  describe({.rank = rank(), .peer = peer, .operation = "mailbox send", .bytes = std::int64_t(bytes)},
                           reaches(peer) ? "more than the " + std::to_string(shape_.payload_bytes) + " bytes a slot holds"
                                         : "the peer is not on this host"));
    sender& out = outbound_[segments_.local_index(peer)];
    slot_header& slot = slot_at(out.to, out.sent % shape_.slots);
    if (slot.sequence.load(std::memory_order_acquire) != 0) return false;
    slot.tag = tag;
    slot.data = data;
    slot.bytes = bytes;
    if (bytes) std::memcpy(payload_of(slot), src, bytes);
    slot.sequence.store(++out.sent, std::memory_order_release);
    return true;
  }

  /// The earliest message from `peer` whose tag is `tag`, in whatever order messages of
  /// other tags arrived, left where it lies until take(peer), which must come before any
  /// other call about `peer`. Null when there is none yet.
  [[nodiscard]] const message* try_peek(int peer, std::uint64_t tag) {
    return try_peek_if(peer, [tag](std::uint64_t t) { return t == tag; });
  }

  /// As try_peek, for the earliest message whose tag satisfies `wanted(tag)`: one look
  /// serves many receives. Messages ahead of it that nobody wants are set aside.
  template <class Pred>
  [[nodiscard]] const message* try_peek_if(int peer, Pred wanted) {
    receiver& in = inbound(peer, "mailbox receive");
    // Messages set aside earlier came before any still in the ring.
    for (std::size_t k = 0; k < in.unexpected.size(); ++k)
      if (const held& m = in.unexpected[k]; wanted(m.tag)) {
        in.peeked = {m.payload.data(), static_cast<std::size_t>(m.bytes), m.data};
        in.peeked_at = k;
        return &in.peeked;
      }
    // At most one ring's worth a call, so that a fast sender cannot keep it here.
    for (std::size_t k = 0; k < shape_.slots; ++k) {
      slot_header* slot = arrived(in, peer);
      if (!slot) return nullptr;
      if (wanted(slot->tag)) {
        in.peeked = {payload_of(*slot), static_cast<std::size_t>(slot->bytes), slot->data};
        in.peeked_at = in_ring;
        return &in.peeked;
      }
      set_aside(in, *slot);
    }
    return nullptr;
  }

  /// Frees the message try_peek(peer, ...) returned.
  void take(int peer) {
    receiver& in = inbound(peer, "mailbox receive");
    if (in.peeked_at == in_ring) {
      release(in, slot_at(in.from, in.taken % shape_.slots));
    } else {
      in.spare.push_back(std::move(in.unexpected[in.peeked_at].payload));
      in.unexpected.erase(in.unexpected.begin() + static_cast<std::ptrdiff_t>(in.peeked_at));
    }
    in.peeked_at = in_ring;
  }

  /// Takes the earliest message from `peer` whose tag is `tag` (as try_peek): copies at
  /// most `capacity` bytes of it into `dst`, sets `*bytes` to the length sent (more than
  /// `capacity` means truncated) and `*data`, and frees it. False when there is none yet.
  [[nodiscard]] bool try_receive(int peer, std::uint64_t tag, void* dst, std::size_t capacity, std::size_t* bytes,
                                 std::uint64_t* data) {
    const message* m = try_peek(peer, tag);
    if (!m) return false;
    *bytes = m->bytes;
    *data = m->data;
    // The length comes from another process: never copy past a slot.
    if (const std::size_t n = std::min({m->bytes, capacity, shape_.payload_bytes})) std::memcpy(dst, m->payload, n);
    take(peer);
    return true;
  }

  /// Frees every message waiting from `peer` (every local peer when `peer` < 0) whose tag
  /// satisfies `pred(tag)`, so that a failed call's late messages do not fill the rings.
  /// Empties those rings (the other messages are kept, in order, in this rank's memory).
  /// Returns how many it freed.
  template <class Pred>
  std::size_t discard_if(int peer, Pred pred) {
    std::size_t freed = 0;
    const auto& locals = segments_.local_ranks();
    for (std::size_t i = 0; i < inbound_.size(); ++i) {
      const int from = locals[i];
      if (from == rank() || (peer >= 0 && from != peer)) continue;
      receiver& in = inbound_[i];
      while (slot_header* slot = arrived(in, from)) set_aside(in, *slot);
      const auto before = in.unexpected.size();
      std::erase_if(in.unexpected, [&](held& m) {
        if (!pred(m.tag)) return false;
        in.spare.push_back(std::move(m.payload));
        return true;
      });
      freed += before - in.unexpected.size();
    }
    return freed;
  }

  /// This host's identity (host_segments::detect_host_identity).
  static std::string detect_host_identity() { return host_segments::detect_host_identity(); }

 private:
  // The sequence word and header share the payload's first cache line: a message of up
  // to 32 bytes is one line.
  struct slot_header {
    std::atomic<std::uint64_t> sequence;  // 0: free; else the message's number, from 1
    std::uint64_t tag;
    std::uint64_t data;
    std::uint64_t bytes;
  };
  static constexpr std::size_t header_bytes = 32;
  static_assert(sizeof(slot_header) == header_bytes, "A slot's first line should hold 32 payload bytes.");
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
                "Shared-memory mailboxes need lock-free (address-free) 64-bit atomics.");

  /// A message taken out of the ring ahead of its receive.
  struct held {
    std::uint64_t tag, data, bytes;
    std::vector<std::byte> payload;
  };

  struct sender {
    std::byte* to = nullptr;  // the ring, in the receiver's segment
    std::uint64_t sent = 0;   // messages sent: the next goes to slot sent % slots
  };
  static constexpr std::size_t in_ring = ~std::size_t(0);
  struct receiver {
    std::byte* from = nullptr;      // the ring, in this rank's segment
    std::uint64_t taken = 0;        // messages taken out of the ring
    std::vector<held> unexpected;   // in arrival order
    std::vector<std::vector<std::byte>> spare;  // payload buffers to reuse
    message peeked{};
    std::size_t peeked_at = in_ring;  // index into unexpected, or in_ring
  };

  static geometry checked(geometry g) {
    if (g.slots == 0 || g.payload_bytes == 0)
      throw error(errc::invalid_argument, "local mailboxes: a ring needs at least one slot of at least one byte (got " +
                                              std::to_string(g.slots) + " slots of " + std::to_string(g.payload_bytes) +
                                              " bytes)");
    return g;
  }
  static std::uint64_t layout_of(const geometry& g) { return std::uint64_t(g.payload_bytes) << 20 | g.slots; }

  slot_header& slot_at(std::byte* ring, std::size_t i) const {
    return *std::launder(reinterpret_cast<slot_header*>(ring + i * stride_));
  }
  static std::byte* payload_of(slot_header& slot) { return reinterpret_cast<std::byte*>(&slot) + header_bytes; }

  receiver& inbound(int peer, const char* operation) {
    if (!reaches(peer))
      throw error(errc::invalid_argument,
                  describe({.rank = rank(), .peer = peer, .operation = operation}, "the peer is not on this host"));
    return inbound_[segments_.local_index(peer)];
  }

  /// The next message of `in`'s ring, or null when it has not arrived.
  slot_header* arrived(receiver& in, int peer) const {
    slot_header& slot = slot_at(in.from, in.taken % shape_.slots);
    const std::uint64_t s = slot.sequence.load(std::memory_order_acquire);
    if (s == 0) return nullptr;
    if (s != in.taken + 1)  // only a foreign write into the segment gets here
      throw error(errc::transport, describe({.rank = rank(), .peer = peer, .operation = "mailbox receive"},
                                            "slot " + std::to_string(in.taken % shape_.slots) + " holds message " +
                                                std::to_string(s) + " where " + std::to_string(in.taken + 1) +
                                                " was expected: the shared ring is corrupt"));
    return &slot;
  }

  static void release(receiver& in, slot_header& slot) {
    slot.sequence.store(0, std::memory_order_release);
    ++in.taken;
  }

  void set_aside(receiver& in, slot_header& slot) {
    held& m = in.unexpected.emplace_back();
    m.tag = slot.tag;
    m.data = slot.data;
    m.bytes = slot.bytes;
    if (!in.spare.empty()) {
      m.payload = std::move(in.spare.back());
      in.spare.pop_back();
    }
    m.payload.resize(std::min<std::size_t>(m.bytes, shape_.payload_bytes));
    if (!m.payload.empty()) std::memcpy(m.payload.data(), payload_of(slot), m.payload.size());
    release(in, slot);
  }

  geometry shape_;
  std::size_t stride_;  // bytes a slot: header and payload, in whole cache lines
  host_segments segments_;
  std::vector<receiver> inbound_;  // per local index: the ring from that rank
  std::vector<sender> outbound_;   // per local index: the ring to that rank
};

}  // namespace mimatrix::transport::detail::fabric
