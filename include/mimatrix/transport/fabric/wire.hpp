// What travels on the wire besides user data: the 64-bit tag of every message, the call
// signature carried as remote CQ data, and the small control messages (abort, liveness
// probe) that let a rank fail its peers at once instead of leaving them to time out.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"

namespace mimatrix::transport::detail::fabric {

/// Tag layout, high bit first:
///   [63] control | [62..43] sender rank (20 bits) | [42..28] call sequence mod 2^15 |
///   [27..0] the schedule's tag; a control message's tag is the control bit alone.
/// The sender's rank is in the tag so providers without directed receive still match a
/// receive to the one peer it names; the sequence keeps calls apart. Every receive names
/// its whole tag (no ignore mask: control_tag says why).
namespace wire {
constexpr std::uint64_t control_bit = std::uint64_t(1) << 63;
constexpr int rank_bits = 20, sequence_bits = 15, tag_bits = 28;
constexpr int max_ranks = 1 << rank_bits;
constexpr std::uint64_t max_tag = (std::uint64_t(1) << tag_bits) - 1;

constexpr std::uint64_t data_tag(int sender, std::uint64_t sequence, std::uint32_t tag) {
  return (std::uint64_t(sender) << (sequence_bits + tag_bits)) |
         ((sequence & ((std::uint64_t(1) << sequence_bits) - 1)) << tag_bits) | (tag & max_tag);
}
/// Every control message carries this one tag (its sender is in the message), so that
/// control receives, which take any of them, are posted without an ignore mask. Through
/// libfabric 1.17's shm, a receive entry keeps the mask of the receive that last used it,
/// and an unexpected data message that reuses one matches any receive posted after it:
/// data went to the wrong receive, and a call hung (docs/transports.md).
constexpr std::uint64_t control_tag = control_bit;
/// Through a mailbox, a receiver's word that it has read a sender's device memory
/// (execution_shared.hpp): the data tag with the control bit, apart from every data tag.
constexpr std::uint64_t read_tag(int receiver, std::uint64_t sequence, std::uint32_t tag) {
  return control_bit | data_tag(receiver, sequence, tag);
}

/// A 16-bit digest of an algorithm's name (FNV-1a folded), as packed signatures carry it.
constexpr std::uint16_t algorithm_digest(std::string_view algorithm) {
  std::uint32_t h = 2166136261u;
  for (char c : algorithm) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return static_cast<std::uint16_t>(h ^ (h >> 16));
}

/// schedule::agreement (the topology's and the algorithm's parameters) folded to 16 bits;
/// 0 stays 0.
constexpr std::uint16_t agreement_digest(std::uint64_t agreement) {
  return static_cast<std::uint16_t>(agreement ^ (agreement >> 16) ^ (agreement >> 32) ^ (agreement >> 48));
}

/// A 16-bit digest of a call's tag (call_options::tag); an untagged call's is 0.
constexpr std::uint16_t tag_digest(std::uint32_t tag) {
  const std::uint32_t h = tag * 0x9E3779B1u;
  return static_cast<std::uint16_t>(h ^ (h >> 16));
}

/// A 16-bit digest of the call sequence's bits above the tag's (sequence / 2^15), 0 for
/// the first 2^15 calls. A message that a call left unreceived (ranks that disagreed on
/// it, each a broadcast's root) matches the receive of the call 2^15 later, whose tag
/// is the same; this digest in the packing tells the two apart. Odd multiplier: distinct
/// for any 2^16 epochs in a row.
constexpr std::uint16_t epoch_digest(std::uint64_t sequence) {
  return static_cast<std::uint16_t>((sequence >> sequence_bits) * 0x9E37u);
}

/// The bits of a packed signature that hold the count: its top bit says a v-form, whose
/// count is its counts' digest (schedule::signature::uneven); a count above the rest is cut
/// to them (2^38 elements are 256 GiB of bytes at least).
constexpr int count_bits = 39;
constexpr std::uint64_t uneven_bit = std::uint64_t(1) << (count_bits - 1);
constexpr std::uint64_t count_mask = uneven_bit - 1;

/// A call's signature packed into the 64 bits of remote CQ data that every data message
/// carries: [63..48] root (calls with one) or the digests of the algorithm's name and of
/// `agreement` (the others), xor the tag's and the epoch's digests and the history of
/// earlier rooted calls' roots and counts | [47..45] dtype | [44..42] op | [41..39] kind |
/// [38] a v-form | [37..0] count, or a v-form's counts digest.
/// A receiver that finds another packing than its own knows its peer runs another call,
/// or the same call by another algorithm, on another topology or with another tag, or
/// after a broadcast whose root the two named differently, or that the message was left
/// by the call 2^15 earlier. (A broadcast's algorithm is left to the start-up check of
/// MIMATRIX_ALGO.)
inline std::uint64_t pack(const signature& s, std::string_view algorithm, std::uint64_t agreement = 0) {
  static_assert(schedule::collective_kinds <= 8, "the packing holds a kind in 3 bits");
  assert(s.kind != schedule::collective::p2p && "p2p batches are packed their own way (increment 2)");
  const std::uint16_t top = (schedule::has_root(s.kind)
                                 ? std::uint16_t(s.root)
                                 : std::uint16_t(algorithm_digest(algorithm) ^ agreement_digest(agreement))) ^
                            tag_digest(s.tag) ^ epoch_digest(s.sequence) ^ s.history;
  return (std::uint64_t(top) << 48) | (std::uint64_t(s.type) << 45) | (std::uint64_t(s.op) << 42) |
         (std::uint64_t(s.kind) << count_bits) | (s.uneven ? uneven_bit : 0) | (s.count & count_mask);
}
/// The part of a packed signature that names the call's shape, as `sequence`; a
/// broadcast's root is read as if the peer's tag and history were `tag` and `history`.
inline signature unpack(std::uint64_t bits, std::uint64_t sequence, std::uint32_t tag = 0,
                        std::uint16_t history = 0) {
  signature s;
  s.type = dtype((bits >> 45) & 7);
  s.op = reduce::op_kind((bits >> 42) & 7);
  s.kind = schedule::collective((bits >> count_bits) & 7);
  s.root = schedule::has_root(s.kind)
               ? int(std::uint16_t(bits >> 48) ^ tag_digest(tag) ^ epoch_digest(sequence) ^ history)
               : 0;
  s.count = bits & count_mask;
  s.uneven = (bits & uneven_bit) != 0;
  s.sequence = sequence;
  s.tag = tag;
  s.history = history;
  return s;
}

/// What every rank must give a call alike, said by the two texts below.
inline constexpr const char* same_algorithm_built_alike =
    "every rank must give a call the same algorithm (the collective's Algorithm, call_options::algorithm, "
    "MIMATRIX_ALGO), built alike (the topology's ring order, node size or shape; the algorithm's rank order "
    "and chunk)";

/// Why a peer's packed signature `theirs` is not this rank's `mine` (`sig` run by
/// `algorithm`): "rank 2 runs allreduce #3 (...) but this rank runs ...", or, when only
/// the top bits differ, that the algorithm (a broadcast's root) or the tag differs: the
/// digests do not tell which.
inline std::string disagreement(int peer, std::uint64_t theirs, std::uint64_t mine, const signature& sig,
                                std::string_view algorithm, std::uint64_t agreement = 0) {
  constexpr std::uint64_t below_top = (std::uint64_t(1) << 48) - 1;
  constexpr std::uint64_t epoch = std::uint64_t(1) << sequence_bits;
  const std::string who = "rank " + std::to_string(peer) + " runs ";
  for (std::uint64_t back = epoch; back <= sig.sequence && back <= 64 * epoch; back += epoch) {
    signature earlier = sig;
    earlier.sequence -= back;
    if (theirs == pack(earlier, algorithm, agreement))
      return "a message of rank " + std::to_string(peer) + " left unreceived by " +
             std::string(schedule::call_name(sig)) + " #" + std::to_string(earlier.sequence) +
             " reached this rank's " + std::string(schedule::call_name(sig)) + " #" +
             std::to_string(sig.sequence) + " (calls 2^15 apart share the wire's tags): call #" +
             std::to_string(earlier.sequence) + " ended without receiving it, as when ranks disagree on a "
             "broadcast's root (each names itself: all send, none receives); every rank must give a call "
             "the same arguments";
  }
  if ((theirs & below_top) != (mine & below_top))
    return who + to_string(unpack(theirs, sig.sequence, 0, sig.history)) + " but this rank runs " + to_string(sig);
  const std::string tag = std::to_string(sig.tag);
  signature shape = sig;  // what both ranks run: the peer's root and tag are not known
  shape.tag = 0;
  // Only after a broadcast can the histories differ (ranks that ran other calls before
  // were told then).
  const std::string earlier_root =
      sig.history ? ", or after an earlier call with a root (broadcast, reduce, gather, scatter) whose root or "
                    "count it named otherwise than this rank"
                  : "";
  if (schedule::has_root(sig.kind)) {
    const std::string text = to_string(shape);
    return who + text.substr(0, text.rfind(", root")) + ") with another root or tag than this rank's (root " +
           std::to_string(sig.root) + ", tag " + tag + ")" + earlier_root +
           "; every rank must give a call the same root and tag (call_options::tag)";
  }
  return who + to_string(shape) + " with another algorithm, topology or tag than this rank's (algorithm '" +
         std::string(algorithm) + "', tag " + tag + ")" + earlier_root + "; " + same_algorithm_built_alike +
         ", and the same tag (call_options::tag)" + (sig.history ? " and root" : "");
}

/// Why a peer whose packing equals this rank's still disagrees: the full schedule::agreement
/// differs (a broadcast's packing carries its root, not the digest; for the others, 16 bits
/// of 64 met by chance).
inline std::string built_differently(int peer, const signature& sig, std::string_view algorithm) {
  return "rank " + std::to_string(peer) + " runs " + to_string(sig) + " on another topology or algorithm "
         "than this rank's (algorithm '" + std::string(algorithm) + "'); " + same_algorithm_built_alike;
}

/// The same, for a rank that runs `plan`.
inline std::string disagreement(int peer, std::uint64_t theirs, std::uint64_t mine, const signature& sig,
                                const schedule::schedule& plan) {
  return disagreement(peer, theirs, mine, sig, plan.algorithm, plan.agreement);
}

/// The remote CQ data of a one-sided write, the flag it raises at the target:
///   [63..44] writer rank | [43..29] call sequence mod 2^15 | [28..24] flag tag |
///   [23..0] a digest of the call's signature.
/// A flag whose digest differs from the target's own tells it the writer runs another call.
constexpr int flag_tag_bits = 5;
constexpr std::uint32_t max_flag_tag = (1u << flag_tag_bits) - 1;
constexpr int digest_bits = 24;

inline std::uint32_t digest(std::uint64_t packed_signature) {
  return static_cast<std::uint32_t>((packed_signature * 0x9E3779B97F4A7C15ull) >> (64 - digest_bits));
}

struct flag {
  int writer = 0;
  std::uint32_t sequence = 0;  // mod 2^15
  std::uint32_t tag = 0;
  std::uint32_t digest = 0;
};

constexpr std::uint32_t sequence_mask = (1u << sequence_bits) - 1;

inline std::uint64_t flag_data(int writer, std::uint64_t sequence, std::uint32_t tag, std::uint32_t sig_digest) {
  return (std::uint64_t(writer) << 44) | (std::uint64_t(sequence & sequence_mask) << 29) |
         (std::uint64_t(tag & max_flag_tag) << digest_bits) | sig_digest;
}
inline flag read_flag(std::uint64_t data) {
  return {int(data >> 44), std::uint32_t(data >> 29) & sequence_mask, std::uint32_t(data >> digest_bits) & max_flag_tag,
          std::uint32_t(data) & ((1u << digest_bits) - 1)};
}
/// Whether call `a` (mod 2^15) came before call `b`: within half the sequence space behind it.
inline bool earlier(std::uint32_t a, std::uint32_t b) {
  const std::uint32_t behind = (b - a) & sequence_mask;
  return behind != 0 && behind < (1u << (sequence_bits - 1));
}

/// abort: one call failed; shutdown: the communicator was aborted (every call fails);
/// left: the sender closed its endpoint after `value` calls (it joins none from #value on).
/// which_call: a stalled call's question, which call the peer runs as its sequence (value;
/// text: the asker's packed signature and its schedule::agreement, in decimal).
enum class control_type : std::uint8_t { abort = 1, ping = 2, pong = 3, shutdown = 4, left = 5, which_call = 6 };

/// A control message: a fixed header and, for abort, the failure's text.
struct control_message {
  static constexpr std::size_t capacity = 1024;
  static constexpr std::size_t header = 16;

  control_type type = control_type::abort;
  errc code = errc::aborted;
  int source = -1;
  std::uint64_t value = 0;  // abort: the call's sequence; ping/pong: the probe's nonce; left: calls made
  std::string text;

  /// Writes the message into `out` (capacity bytes); returns its length.
  std::size_t encode(std::byte* out) const {
    const std::size_t n = std::min(text.size(), capacity - header);
    out[0] = std::byte(type);
    out[1] = std::byte(static_cast<std::uint8_t>(code));
    const auto len = static_cast<std::uint16_t>(n);
    std::memcpy(out + 2, &len, 2);
    const auto src = static_cast<std::int32_t>(source);
    std::memcpy(out + 4, &src, 4);
    std::memcpy(out + 8, &value, 8);
    std::memcpy(out + header, text.data(), n);
    return header + n;
  }
  /// Reads a received message; false when it is too short to be one.
  bool decode(const std::byte* in, std::size_t bytes) {
    if (bytes < header) return false;
    type = control_type(in[0]);
    code = errc(static_cast<std::uint8_t>(in[1]));
    std::uint16_t len = 0;
    std::memcpy(&len, in + 2, 2);
    std::int32_t src = 0;
    std::memcpy(&src, in + 4, 4);
    source = src;
    std::memcpy(&value, in + 8, 8);
    if (header + len > bytes) return false;
    text.assign(reinterpret_cast<const char*>(in + header), len);
    return true;
  }
};
}  // namespace wire

}  // namespace mimatrix::transport::detail::fabric
