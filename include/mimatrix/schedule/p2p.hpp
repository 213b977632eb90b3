// The transport-neutral part of point-to-point calls: a batch of sends and receives as
// one schedule over a buffer table (entry k is op k), the tag layout that matches them,
// and the manifests two ranks compare to find an op one of them lacks (docs/p2p).
//
//   rank a's batch with b          rank b's batch with a
//   send tag 5 (entry 0) ───────► recv tag 5 (entry 1)      occurrence 0 of (send, b, 5)
//   send tag 5 (entry 2) ───────► recv tag 5 (entry 3)      occurrence 1: same-tag order kept
//   recv tag 9 (entry 1) ◄─────── send tag 9 (entry 0)      no step depends on another
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "mimatrix/core/digest.hpp"
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::schedule::p2p {

/// One op of a batch; its buffer is entry k of the schedule (k: its index in the batch).
struct op {
  bool send = true;
  int peer = 0;
  std::uint32_t tag = 0;
  std::uint64_t count = 0;
  dtype type = dtype::uint8;

  std::uint64_t bytes() const { return count * size_of(type); }
};

/// Step tag: [27..12] the user's tag, [11..0] its occurrence among the batch's ops of one
/// (direction, peer, tag). The user tag 65535 is the manifest's (increment 2's wire).
inline constexpr int occurrence_bits = 12;
inline constexpr std::uint32_t max_occurrences = std::uint32_t(1) << occurrence_bits;  // of one (direction, peer, tag)
inline constexpr std::uint32_t max_user_tag = 65534;
constexpr std::uint32_t step_tag(std::uint32_t user, std::uint32_t occurrence) {
  return user << occurrence_bits | occurrence;
}
constexpr std::uint32_t user_tag(std::uint32_t step) { return step >> occurrence_bits; }
constexpr std::uint32_t occurrence(std::uint32_t step) { return step & (max_occurrences - 1); }
inline constexpr std::uint32_t manifest_tag = step_tag(65535, 0);
/// A step's tag as a message names it: a p2p step's user tag ("7", "7 (#1 of it)"), a
/// collective's as it is.
inline std::string tag_text(collective kind, std::uint32_t tag) {
  if (kind != collective::p2p) return std::to_string(tag);
  return std::to_string(user_tag(tag)) + (occurrence(tag) ? " (#" + std::to_string(occurrence(tag)) + " of it)" : "");
}
/// A batch's ops in bytes are below this (region offsets are 56 bits).
inline constexpr std::uint64_t max_bytes = region::offset_limit;

/// What a rank does with one peer in a batch, as that rank sees it.
struct manifest_entry {
  bool sends = true;
  std::uint32_t tag = 0, occurrence = 0;
  std::uint64_t count = 0;
  dtype type = dtype::uint8;
  friend bool operator==(const manifest_entry&, const manifest_entry&) = default;
  auto key() const { return std::tuple{!sends, tag, occurrence}; }  // sends first
};

/// The occurrence of each op: how many earlier ops of the batch share its (direction, peer, tag).
inline std::vector<std::uint32_t> occurrences(std::span<const op> ops) {
  std::map<std::tuple<bool, int, std::uint32_t>, std::uint32_t> seen;
  std::vector<std::uint32_t> occ(ops.size());
  for (std::size_t k = 0; k < ops.size(); ++k) occ[k] = seen[{ops[k].send, ops[k].peer, ops[k].tag}]++;
  return occ;
}

/// This rank's ops with `peer`, in canonical order (sends first, by tag and occurrence).
inline std::vector<manifest_entry> manifest(std::span<const op> ops, int peer) {
  const auto occ = occurrences(ops);
  std::vector<manifest_entry> m;
  for (std::size_t k = 0; k < ops.size(); ++k)
    if (ops[k].peer == peer) m.push_back({ops[k].send, ops[k].tag, occ[k], ops[k].count, ops[k].type});
  std::sort(m.begin(), m.end(), [](const auto& a, const auto& b) { return a.key() < b.key(); });
  return m;
}

/// The peer's manifest as what it expects of this rank: its sends become receives here.
inline std::vector<manifest_entry> flipped(std::vector<manifest_entry> theirs) {
  for (auto& e : theirs) e.sends = !e.sends;
  std::sort(theirs.begin(), theirs.end(), [](const auto& a, const auto& b) { return a.key() < b.key(); });
  return theirs;
}

/// Whether two sides of a pair-batch meet: every op of one has its counterpart in the other.
inline bool agree(std::span<const manifest_entry> mine, std::span<const manifest_entry> theirs) {
  const auto want = flipped({theirs.begin(), theirs.end()});
  return std::equal(mine.begin(), mine.end(), want.begin(), want.end());
}

/// A digest of a manifest and its pair epoch, never 0 (the wire's check, increment 2).
inline std::uint64_t digest(std::span<const manifest_entry> m, std::uint64_t epoch) {
  mimatrix::digest d;
  d.mix(epoch).mix(m.size());
  for (const auto& e : m)
    d.mix(std::uint64_t(e.sends)).mix(e.tag).mix(e.occurrence).mix(e.count).mix(std::uint64_t(e.type));
  return d.value() ? d.value() : 1;
}

/// "tag 7 (100 x float32)", "tag 7 (2nd, 100 x float32)".
inline std::string describe(const manifest_entry& e) {
  return "tag " + std::to_string(e.tag) + " (" + (e.occurrence ? "#" + std::to_string(e.occurrence) + " of it, " : "") +
         std::to_string(e.count) + " x " + std::string(to_string(e.type)) + ")";
}

/// What differs between this rank's (`me`) side of a pair-batch with `peer` and the peer's:
/// the ops either lacks, or shapes that differ, each naming the tag.
inline std::string difference(int me, int peer, std::span<const manifest_entry> mine,
                              std::span<const manifest_entry> theirs) {
  const auto want = flipped({theirs.begin(), theirs.end()});
  const std::string p = "rank " + std::to_string(peer);
  const auto verb = [](bool sends) { return sends ? "sends" : "receives"; };
  std::map<std::tuple<bool, std::uint32_t, std::uint32_t>, const manifest_entry*> expected;
  for (const auto& e : want) expected[{!e.sends, e.tag, e.occurrence}] = &e;
  std::vector<std::string> parts;
  for (const auto& e : mine) {
    auto it = expected.find({!e.sends, e.tag, e.occurrence});
    if (it == expected.end()) {
      parts.push_back("this rank " + std::string(verb(e.sends)) + " " + describe(e) + " that " + p + " does not " +
                      (e.sends ? "receive" : "send") + " in this batch");
      continue;
    }
    const manifest_entry& w = *it->second;
    if (w.count != e.count || w.type != e.type)
      parts.push_back(p + " " + verb(!e.sends) + " " + describe(w) + " where this rank " + verb(e.sends) + " " +
                      describe(e));
    expected.erase(it);
  }
  for (const auto& [key, e] : expected)
    parts.push_back(p + " " + verb(!e->sends) + " " + describe(*e) + " that this rank does not " +
                    (e->sends ? "send" : "receive") + " in this batch");
  std::string text;
  for (const auto& s : parts) text += (text.empty() ? "" : "; ") + s;
  return text + ". Batches between two ranks meet in order: rank " + std::to_string(me) + "'s k-th batch naming " + p +
         " meets " + p + "'s k-th batch naming rank " + std::to_string(me) + ", and inside it the n-th send with a tag "
         "meets the n-th receive with that tag";
}

/// "op 3 (send to rank 2, tag 7)": an op in a message.
inline std::string describe_op(std::span<const op> ops, std::size_t k) {
  return "op " + std::to_string(k) + " (" + (ops[k].send ? "send to" : "recv from") + " rank " +
         std::to_string(ops[k].peer) + ", tag " + std::to_string(ops[k].tag) + ")";
}

/// What makes `ops` no batch in a group of `size`: a peer out of range, a tag above
/// max_user_tag, a buffer past max_bytes, too many ops of one (direction, peer, tag) or in
/// all; none where it is one.
inline std::optional<std::string> problem(std::span<const op> ops, int size) {
  if (ops.size() > max_entries)
    return "a batch of " + std::to_string(ops.size()) + " ops; a batch holds at most " +
           std::to_string(max_entries) + " (split it)";
  const auto occ = occurrences(ops);
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const op& o = ops[k];
    if (o.peer < 0 || o.peer >= size)
      return describe_op(ops, k) + ": peer " + std::to_string(o.peer) + " is outside a group of " + std::to_string(size);
    if (o.tag > max_user_tag)
      return describe_op(ops, k) + ": tag " + std::to_string(o.tag) + " is above " + std::to_string(max_user_tag) +
             ", the largest a p2p op may carry";
    if (size_of(o.type) == 0 || o.count >= max_bytes / size_of(o.type))
      return describe_op(ops, k) + ": " + std::to_string(o.count) + " elements reach past 2^56 bytes";
    if (occ[k] >= max_occurrences)
      return describe_op(ops, k) + ": more than " + std::to_string(max_occurrences - 1) +
             " ops of one direction, peer and tag in a batch";
  }
  return std::nullopt;
}

/// Why the sends of rank `rank` to itself and its receives from itself do not pair up by
/// (tag, occurrence) with equal shapes; none where they do.
inline std::optional<std::string> self_mismatch(std::span<const op> ops, int rank) {
  const auto mine = manifest(ops, rank);
  if (agree(mine, mine)) return std::nullopt;
  for (const auto& e : mine) {
    const auto partner = std::find_if(mine.begin(), mine.end(), [&](const auto& o) {
      return o.sends != e.sends && o.tag == e.tag && o.occurrence == e.occurrence;
    });
    if (partner == mine.end())
      return std::string("a ") + (e.sends ? "send to" : "receive from") + " itself with " + describe(e) +
             " meets no " + (e.sends ? "receive from" : "send to") + " itself in this batch";
    if (e.sends && (partner->count != e.count || partner->type != e.type))
      return "a send to itself with " + describe(e) + " meets a receive from itself with " + describe(*partner);
  }
  return "its sends to itself and receives from itself do not pair up";  // not reached
}

/// Rank `rank`'s schedule of batch `ops` in a group of `size`: a send or receive a peer op,
/// a copy a pair of self ops. Throws invalid_argument (problem()) or mismatch (self_mismatch()).
inline schedule build(std::span<const op> ops, int rank, int size) {
  if (auto why = problem(ops, size)) throw error(errc::invalid_argument, "rank " + std::to_string(rank) + ": " + *why);
  if (auto why = self_mismatch(ops, rank)) throw error(errc::mismatch, "rank " + std::to_string(rank) + ": " + *why);
  builder b(descriptor{collective::p2p, size, 0, 1}, rank, "p2p");
  b.reserve(ops.size(), 0);
  const auto occ = occurrences(ops);
  const auto whole = [&](std::size_t k) { return region{entry(k), 0, ops[k].bytes()}; };
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const op& o = ops[k];
    if (o.peer == rank) {
      if (o.send) continue;  // the receive copies from its send
      for (std::size_t i = 0; i < ops.size(); ++i)
        if (ops[i].send && ops[i].peer == rank && ops[i].tag == o.tag && occ[i] == occ[k]) b.copy(whole(i), whole(k));
      continue;
    }
    const std::uint32_t tag = step_tag(o.tag, occ[k]);
    if (o.send)
      b.send(o.peer, tag, whole(k));
    else
      b.recv(o.peer, tag, whole(k));
  }
  schedule s = std::move(b).build();
  for (const op& o : ops) s.entry_bytes.push_back(o.bytes());
  return s;
}

}  // namespace mimatrix::schedule::p2p
