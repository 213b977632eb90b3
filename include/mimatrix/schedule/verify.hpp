// The symbolic verifier: runs a whole group of schedules on sets of contributions instead
// of numbers and proves structure, matching, race freedom (within a rank, and across ranks
// where one-sided writes land), deadlock freedom and the result.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::schedule {

struct verify_options {
  /// Input and output are one memory: input starts at desc.in_place_input_offset(rank),
  /// output at desc.in_place_output_offset(rank) (NCCL's convention).
  bool in_place = false;
};

/// `ok`, or the first problem found, naming rank, step, kind, peer, tag and region.
struct verify_result {
  bool ok = true;
  std::string message;
  explicit operator bool() const { return ok; }
};

namespace detail {

inline constexpr std::uint32_t no_step = std::numeric_limits<std::uint32_t>::max();

/// Rank sets as handles into a pool of bitsets: set i is words [i*w, (i+1)*w). Ids below
/// `size` are the singletons. Unions are memoized by the pair of handles, because
/// schedules move whole chunks: every element of a chunk meets the same pair.
class rank_sets {
 public:
  explicit rank_sets(int size) : size_(size), words_per_(std::size_t(size + 63) / 64) {
    words_.assign(std::size_t(size) * words_per_, 0);
    counts_.assign(std::size_t(size), 1);
    for (int r = 0; r < size; ++r) words_[std::size_t(r) * words_per_ + std::size_t(r) / 64] |= bit(r);
  }

  static std::uint32_t singleton(int r) { return static_cast<std::uint32_t>(r); }
  int count(std::uint32_t id) const { return counts_[id]; }
  bool contains(std::uint32_t id, int r) const {
    return (words_[id * words_per_ + std::size_t(r) / 64] & bit(r)) != 0;
  }

  /// The union of two disjoint sets (a new handle), or `-1 - r` when both hold rank r.
  std::int64_t unite(std::uint32_t a, std::uint32_t b) {
    if (a > b) std::swap(a, b);
    const auto [it, fresh] = unions_.try_emplace((std::uint64_t(a) << 32) | b, 0);
    if (!fresh) return it->second;
    for (std::size_t k = 0; k < words_per_; ++k)
      if (const auto both = words_[a * words_per_ + k] & words_[b * words_per_ + k])
        return it->second = -1 - std::int64_t(k * 64 + std::size_t(std::countr_zero(both)));
    const auto id = static_cast<std::uint32_t>(counts_.size());
    words_.resize(words_.size() + words_per_);  // may move words_: index only after this
    for (std::size_t k = 0; k < words_per_; ++k)
      words_[id * words_per_ + k] = words_[a * words_per_ + k] | words_[b * words_per_ + k];
    counts_.push_back(counts_[a] + counts_[b]);
    return it->second = id;
  }

  /// "{0, 2}", or "61 of 64 ranks, missing 3" when large.
  std::string describe(std::uint32_t id) const {
    std::string s;
    if (counts_[id] <= 8) {
      s = "{";
      for (int r = 0; r < size_; ++r)
        if (contains(id, r)) s += (s.size() > 1 ? ", " : "") + std::to_string(r);
      return s + "}";
    }
    s = std::to_string(counts_[id]) + " of " + std::to_string(size_) + " ranks";
    for (int r = 0; r < size_; ++r)
      if (!contains(id, r)) return s + ", missing " + std::to_string(r);
    return s;
  }

 private:
  static std::uint64_t bit(int r) { return std::uint64_t(1) << (r % 64); }
  int size_;
  std::size_t words_per_;
  std::vector<std::uint64_t> words_;
  std::vector<int> counts_;
  std::unordered_map<std::uint64_t, std::int64_t> unions_;
};

/// What one element holds: which input element it came from, whose contributions it
/// carries, and how many times it was finalized.
struct value {
  std::uint32_t origin = 0;
  std::uint32_t set = 0;
  std::uint16_t finalized = 0;
  bool defined = false;
};

/// Where one rank's buffers live, in elements. Out of place: arrays input, output,
/// scratch. In place: output shares array 0 with input, at its own offset.
struct layout {
  std::size_t base[3] = {0, 0, 0};
  int array[3] = {0, 1, 2};
  std::size_t elems[3] = {0, 0, 0};
};

class verifier {
 public:
  verifier(std::span<const schedule> group, verify_options options) : group_(group), options_(options) {}

  verify_result run() {
    const bool ok = check_structure() && match() && match_flags() && check_races() &&
                    (!one_sided_ || check_landing_races()) && simulate() && check_result();
    return {ok, ok ? std::string() : std::move(message_)};
  }

 private:
  // --- helpers -------------------------------------------------------------------------
  bool fail(std::string message) {
    message_ = std::move(message);
    return false;
  }
  const step& at(int rank, std::size_t i) const { return group_[std::size_t(rank)].steps[i]; }
  /// "rank 1 step 4 (recv_reduce from peer 0, tag 3, src output[0,16), dst output[0,16))"
  std::string where(int rank, std::size_t i) const {
    return "rank " + std::to_string(rank) + " step " + std::to_string(i) + " (" + to_string(at(rank, i)) + ")";
  }
  static bool reads_src(step_kind k) {
    return k == step_kind::send || k == step_kind::recv_reduce || k == step_kind::reduce || k == step_kind::copy ||
           k == step_kind::write || k == step_kind::reduce_slots;
  }
  /// Writes dst in the rank's own buffers (a write's dst is the peer's).
  static bool writes_dst(step_kind k) {
    return k == step_kind::recv || k == step_kind::recv_reduce || k == step_kind::reduce || k == step_kind::copy ||
           k == step_kind::finalize || k == step_kind::reduce_slots;
  }
  std::size_t buffer_bytes(int rank, buffer b) const {
    switch (b) {
      case buffer::input: return desc_.input_bytes();
      case buffer::output: return desc_.output_bytes();
      case buffer::scratch: return group_[std::size_t(rank)].scratch_bytes;
    }
    return 0;
  }
  std::size_t first_elem(int rank, const region& r) const {
    const auto& l = layouts_[std::size_t(rank)];
    return l.base[std::size_t(r.where)] + r.offset / es_;
  }
  std::vector<value>& array_of(int rank, buffer b) {
    return memory_[std::size_t(rank) * 3 + std::size_t(layouts_[std::size_t(rank)].array[std::size_t(b)])];
  }
  std::string byte_at(const region& r, std::size_t k) const {
    return std::string(to_string(r.where)) + " byte " + std::to_string(r.offset + k * es_);
  }

  // --- a) structure --------------------------------------------------------------------
  /// `owner` is whose buffer the region is in: the rank itself, or a write's peer.
  bool check_region(int rank, std::size_t i, const region& r, const char* role, int owner = -1) {
    if (owner < 0) owner = rank;
    const auto b = static_cast<std::size_t>(r.where);
    if (b > 2) return fail(where(rank, i) + ": " + role + " names an unknown buffer");
    const auto size = buffer_bytes(owner, r.where);
    if (r.offset > size || r.bytes > size - r.offset)
      return fail(where(rank, i) + ": " + role + " " + to_string(r) + " lies outside the " +
                  (owner == rank ? "" : "rank " + std::to_string(owner) + "'s ") + std::string(to_string(r.where)) +
                  " buffer (" + std::to_string(size) + " bytes)");
    if (r.offset % es_ != 0 || r.bytes % es_ != 0)
      return fail(where(rank, i) + ": " + role + " " + to_string(r) + " is not a multiple of elem_size " +
                  std::to_string(es_));
    return true;
  }

  bool check_structure() {
    if (group_.empty()) return fail("empty group: no schedules to verify");
    desc_ = group_[0].desc;
    p_ = desc_.size;
    es_ = desc_.elem_size;
    if (p_ < 1 || std::size_t(p_) != group_.size())
      return fail("group has " + std::to_string(group_.size()) + " schedules but rank 0's descriptor (" +
                  to_string(desc_) + ") says size " + std::to_string(p_));
    if (es_ == 0) return fail("descriptor (" + to_string(desc_) + ") has elem_size 0");
    if (desc_.kind == collective::broadcast && (desc_.root < 0 || desc_.root >= p_))
      return fail("descriptor (" + to_string(desc_) + ") has root out of range");
    constexpr auto max_elems = std::size_t(std::numeric_limits<std::uint32_t>::max());
    if (desc_.input_bytes() / es_ >= max_elems || desc_.output_bytes() / es_ >= max_elems)
      return fail("descriptor (" + to_string(desc_) + ") is too large to verify symbolically");

    offsets_.assign(std::size_t(p_) + 1, 0);
    layouts_.assign(std::size_t(p_), {});
    for (int r = 0; r < p_; ++r) {
      const auto& s = group_[std::size_t(r)];
      if (!(s.desc == desc_))
        return fail("rank " + std::to_string(r) + ": descriptor (" + to_string(s.desc) + ") differs from rank 0's (" +
                    to_string(desc_) + ")");
      if (s.rank != r)
        return fail("schedule at index " + std::to_string(r) + " says it is rank " + std::to_string(s.rank));
      if (s.steps.size() >= no_step) return fail("rank " + std::to_string(r) + ": too many steps");
      const auto n = s.steps.size();
      for (std::size_t i = 0; i < n; ++i) {
        const auto& st = s.steps[i];
        if (st.kind > step_kind::reduce_slots) return fail("rank " + std::to_string(r) + " step " + std::to_string(i) + ": unknown step kind");
        for (step_id d : st.deps)
          if (d >= i) return fail(where(r, i) + ": depends on step " + std::to_string(d) + ", which is not earlier");
        if (has_peer(st.kind) && (st.peer < 0 || st.peer >= p_ || st.peer == r))
          return fail(where(r, i) + ": peer " + std::to_string(st.peer) +
                      (st.peer == r ? " is the rank itself" : " is out of range [0," + std::to_string(p_) + ")"));
        if (reads_src(st.kind) && !check_region(r, i, st.src, "src")) return false;
        if (writes_dst(st.kind) && !check_region(r, i, st.dst, "dst")) return false;
        if (st.kind == step_kind::write) {
          if (st.dst.where == buffer::input)
            return fail(where(r, i) + ": lands in rank " + std::to_string(st.peer) +
                        "'s input; a write lands in the peer's output or scratch");
          if (!check_region(r, i, st.dst, "dst", st.peer)) return false;
          if (st.src.bytes != st.dst.bytes)
            return fail(where(r, i) + ": src has " + std::to_string(st.src.bytes) + " bytes but dst has " +
                        std::to_string(st.dst.bytes));
          one_sided_ = true;
        }
        if (st.kind == step_kind::notify) one_sided_ = true;
        if (st.kind == step_kind::reduce_slots
                ? (st.dst.bytes == 0 ? st.src.bytes != 0 : st.src.bytes == 0 || st.src.bytes % st.dst.bytes != 0)
                : reads_src(st.kind) && writes_dst(st.kind) && st.src.bytes != st.dst.bytes)
          return fail(where(r, i) + ": src has " + std::to_string(st.src.bytes) + " bytes but dst has " +
                      std::to_string(st.dst.bytes) +
                      (st.kind == step_kind::reduce_slots ? " (src must hold whole slots of dst's size)" : ""));
      }
      if (!check_successors(r)) return false;
      offsets_[std::size_t(r) + 1] = offsets_[std::size_t(r)] + n;

      auto& l = layouts_[std::size_t(r)];
      const auto in = desc_.input_bytes() / es_, out = desc_.output_bytes() / es_;
      if (options_.in_place) {
        l.base[0] = desc_.in_place_input_offset(r) / es_;
        l.base[1] = desc_.in_place_output_offset(r) / es_;
        l.array[1] = 0;
        l.elems[0] = std::max(l.base[0] + in, l.base[1] + out);
      } else {
        l.elems[0] = in;
        l.elems[1] = out;
      }
      l.elems[2] = (s.scratch_bytes + es_ - 1) / es_;
    }
    if (offsets_.back() >= no_step) return fail("group has too many steps to verify");
    rank_of_.resize(offsets_.back());
    for (int r = 0; r < p_; ++r)
      std::fill(rank_of_.begin() + std::ptrdiff_t(offsets_[std::size_t(r)]),
                rank_of_.begin() + std::ptrdiff_t(offsets_[std::size_t(r) + 1]), std::uint32_t(r));
    return true;
  }

  /// Executors release dependents through the successor lists, so they must say what
  /// deps say.
  bool check_successors(int r) {
    const auto& s = group_[std::size_t(r)];
    const auto n = s.steps.size();
    std::vector<std::uint32_t> begin(n + 1, 0);
    for (const auto& st : s.steps)
      for (step_id d : st.deps) ++begin[d + 1];
    for (std::size_t i = 0; i < n; ++i) begin[i + 1] += begin[i];
    const auto bad = "rank " + std::to_string(r) + ": successor lists do not match deps (build schedules with builder)";
    if (s.successor_begin != begin || s.successors.size() != begin[n]) return fail(bad);
    std::vector<step_id> want(begin[n]), got(s.successors);
    auto fill = begin;
    for (step_id i = 0; i < n; ++i)
      for (step_id d : s.steps[i].deps) want[fill[d]++] = i;
    for (std::size_t i = 0; i < n; ++i)
      std::sort(got.begin() + begin[i], got.begin() + begin[i + 1]);
    return got == want || fail(bad);
  }

  // --- b) matching ---------------------------------------------------------------------
  // Receiver by receiver: a small open-addressing table of its receives, keyed by
  // (sender, tag), that the sends to it then look up. Linear, and the table stays in cache.
  struct message {
    std::uint64_t key = 0;  // sender << 32 | tag
    std::uint32_t send = no_step, recv = no_step;  // global step ids; both unset: an empty slot
  };

  message& find(std::uint64_t key) {
    auto h = key;  // splitmix64's finalizer: every key bit reaches the low bits
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
    for (auto slot = h & (messages_.size() - 1);; slot = (slot + 1) & (messages_.size() - 1)) {
      auto& m = messages_[slot];
      if (m.key == key || (m.send == no_step && m.recv == no_step)) {
        m.key = key;
        return m;
      }
    }
  }

  std::string where(std::uint32_t g) const {
    const auto r = int(rank_of_[g]);
    return where(r, g - offsets_[std::size_t(r)]);
  }

  bool match() {
    // Sends grouped by receiver (a counting sort, so each group keeps global order).
    std::vector<std::uint32_t> begin(std::size_t(p_) + 1, 0);
    for (int r = 0; r < p_; ++r)
      for (const auto& st : group_[std::size_t(r)].steps)
        if (st.kind == step_kind::send) ++begin[std::size_t(st.peer) + 1];
    for (std::size_t b = 0; b < std::size_t(p_); ++b) begin[b + 1] += begin[b];
    std::vector<std::uint32_t> sends(begin.back()), fill(begin.begin(), begin.end() - 1);
    for (int r = 0; r < p_; ++r)
      for (std::size_t i = 0; i < group_[std::size_t(r)].steps.size(); ++i)
        if (const auto& st = at(r, i); st.kind == step_kind::send)
          sends[fill[std::size_t(st.peer)]++] = std::uint32_t(offsets_[std::size_t(r)] + i);

    partner_.assign(offsets_.back(), no_step);
    for (int b = 0; b < p_; ++b) {
      const auto& steps = group_[std::size_t(b)].steps;
      std::size_t recvs = 0;
      for (const auto& st : steps) recvs += is_communication(st.kind) && st.kind != step_kind::send ? 1 : 0;
      messages_.assign(std::bit_ceil(2 * recvs + 2), {});
      for (std::size_t i = 0; i < steps.size(); ++i) {
        const auto& st = steps[i];
        if (!is_communication(st.kind) || st.kind == step_kind::send) continue;
        auto& m = find((std::uint64_t(st.peer) << 32) | st.tag);
        const auto g = std::uint32_t(offsets_[std::size_t(b)] + i);
        if (m.recv != no_step)
          return fail("duplicate message: " + where(m.recv) + " and " + where(g) + " use the same peer and tag");
        m.recv = g;
      }
      for (auto k = begin[std::size_t(b)]; k < begin[std::size_t(b) + 1]; ++k) {
        const auto g = sends[k];
        const auto a = rank_of_[g];
        auto& m = find((std::uint64_t(a) << 32) | at(int(a), g - offsets_[a]).tag);
        if (m.send != no_step)
          return fail("duplicate message: " + where(m.send) + " and " + where(g) + " use the same peer and tag");
        m.send = g;
        if (m.recv != no_step) {
          partner_[g] = m.recv;
          partner_[m.recv] = g;
        }
      }
    }
    messages_ = {};

    for (int r = 0; r < p_; ++r)
      for (std::size_t i = 0; i < group_[std::size_t(r)].steps.size(); ++i) {
        const auto& st = at(r, i);
        if (!is_communication(st.kind)) continue;
        const auto other = partner_[offsets_[std::size_t(r)] + i];
        if (st.kind != step_kind::send) {
          if (other == no_step)
            return fail(where(r, i) + " has no matching send on rank " + std::to_string(st.peer) + " to peer " +
                        std::to_string(r) + " with tag " + std::to_string(st.tag));
          continue;
        }
        if (other == no_step)
          return fail(where(r, i) + " has no matching recv or recv_reduce on rank " + std::to_string(st.peer) +
                      " from peer " + std::to_string(r) + " with tag " + std::to_string(st.tag));
        const auto& theirs = at(st.peer, other - offsets_[std::size_t(st.peer)]);
        if (st.src.bytes != theirs.dst.bytes)
          return fail(where(r, i) + " sends " + std::to_string(st.src.bytes) + " bytes but " + where(other) +
                      " receives " + std::to_string(theirs.dst.bytes) + " bytes");
      }
    return true;
  }

  // --- b2) flags --------------------------------------------------------------------------
  // Every write or notify from a to b with tag t is counted by the one wait on b with tag
  // t, each (writer, target, tag) once a call, and that wait's count is the number of
  // flags it gets: more would never complete, fewer would let it start before data landed.
  bool match_flags() {
    const auto total = offsets_.back();
    flag_wait_.assign(total, no_step);
    incoming_.assign(total, 0);
    std::unordered_map<std::uint64_t, std::uint32_t> waits;  // rank << 32 | tag -> wait
    for (int r = 0; r < p_; ++r)
      for (std::size_t i = 0; i < group_[std::size_t(r)].steps.size(); ++i)
        if (const auto& st = at(r, i); st.kind == step_kind::wait) {
          const auto g = std::uint32_t(offsets_[std::size_t(r)] + i);
          const auto [it, fresh] = waits.try_emplace((std::uint64_t(r) << 32) | st.tag, g);
          if (!fresh) return fail("duplicate wait: " + where(it->second) + " and " + where(g) + " count the same tag");
        }
    if (!one_sided_) {
      for (const auto& [key, g] : waits)
        if (const auto& st = at(int(rank_of_[g]), g - offsets_[rank_of_[g]]); st.count != 0)
          return fail(where(g) + " waits for " + std::to_string(st.count) + " flags but no write or notify raises tag " +
                      std::to_string(st.tag) + " at rank " + std::to_string(rank_of_[g]));
      return true;
    }
    std::set<std::tuple<int, int, std::uint32_t>> seen;  // (writer, target, tag)
    for (int r = 0; r < p_; ++r)
      for (std::size_t i = 0; i < group_[std::size_t(r)].steps.size(); ++i) {
        const auto& st = at(r, i);
        if (!is_one_sided(st.kind)) continue;
        const auto g = std::uint32_t(offsets_[std::size_t(r)] + i);
        const auto it = waits.find((std::uint64_t(st.peer) << 32) | st.tag);
        if (it == waits.end())
          return fail(where(r, i) + " has no matching wait on rank " + std::to_string(st.peer) + " with tag " +
                      std::to_string(st.tag));
        if (!seen.emplace(r, st.peer, st.tag).second)
          return fail("duplicate flag: " + where(r, i) + " raises tag " + std::to_string(st.tag) + " at rank " +
                      std::to_string(st.peer) + " a second time in one call");
        flag_wait_[g] = it->second;
        ++incoming_[it->second];
      }
    for (const auto& [key, g] : waits)
      if (const auto& st = at(int(rank_of_[g]), g - offsets_[rank_of_[g]]); st.count != incoming_[g])
        return fail(where(g) + " waits for " + std::to_string(st.count) + " flags but " +
                    std::to_string(incoming_[g]) + " writes/notifies raise tag " + std::to_string(st.tag) +
                    " at rank " + std::to_string(rank_of_[g]));
    return true;
  }

  // --- c) races ------------------------------------------------------------------------
  // Steps are indexed in a topological order (deps point back), so per element it is
  // enough to order every access after the last write and every write after the reads
  // since that write: the rest follows by transitivity.
  bool check_races() {
    for (int r = 0; r < p_; ++r)
      if (!check_races(r)) return false;
    return true;
  }

  bool check_races(int r) {
    const auto& steps = group_[std::size_t(r)].steps;
    const auto n = steps.size();
    const auto w = (n + 63) / 64;
    reach_.assign(n * w, 0);  // row i holds the steps that complete before step i starts
    std::uint64_t* const reach = reach_.data();  // raw pointers: this is the hot loop
    for (std::size_t i = 0; i < n; ++i) {
      std::uint64_t* const row = reach + i * w;
      for (step_id d : steps[i].deps) {
        const std::uint64_t* const from = reach + std::size_t(d) * w;
        for (std::size_t k = 0; k <= d / 64; ++k) row[k] |= from[k];  // from has no bits past d
        row[d / 64] |= std::uint64_t(1) << (d % 64);
      }
    }
    const auto ordered = [reach, w](std::size_t before, std::size_t after) {
      return (reach[after * w + before / 64] >> (before % 64) & 1) != 0;
    };

    const auto& l = layouts_[std::size_t(r)];
    std::size_t base[3] = {0, l.elems[0], l.elems[0] + l.elems[1]};
    last_write_.assign(base[2] + l.elems[2], no_step);
    reads_.assign(last_write_.size(), no_step);
    read_nodes_.clear();

    const auto race = [&](std::size_t earlier, bool earlier_writes, std::size_t later, bool later_writes,
                          const region& rg, std::size_t k) {
      return fail("race on rank " + std::to_string(r) + " at " + byte_at(rg, k) + ": step " + std::to_string(earlier) +
                  " (" + to_string(steps[earlier]) + ") " + (earlier_writes ? "writes" : "reads") + " it and step " +
                  std::to_string(later) + " (" + to_string(steps[later]) + ") " + (later_writes ? "writes" : "reads") +
                  " it, but neither depends on the other" +
                  (options_.in_place ? " (in place: input and output are one memory)" : ""));
    };

    std::uint32_t* const last_write = last_write_.data();
    std::uint32_t* const reads = reads_.data();
    for (std::size_t i = 0; i < n; ++i) {
      const auto& st = steps[i];
      if (reads_src(st.kind)) {
        const auto first = base[l.array[std::size_t(st.src.where)]] + first_elem(r, st.src);
        for (std::size_t k = 0; k < st.src.bytes / es_; ++k) {
          const auto x = first + k;
          const auto lw = last_write[x];
          if (lw != no_step && lw != i && !ordered(lw, i)) return race(lw, true, i, false, st.src, k);
          if (reads[x] == no_step || read_nodes_[reads[x]].first != i) {
            read_nodes_.emplace_back(std::uint32_t(i), reads[x]);
            reads[x] = std::uint32_t(read_nodes_.size() - 1);
          }
        }
      }
      if (writes_dst(st.kind)) {
        const auto first = base[l.array[std::size_t(st.dst.where)]] + first_elem(r, st.dst);
        for (std::size_t k = 0; k < st.dst.bytes / es_; ++k) {
          const auto x = first + k;
          const auto lw = last_write[x];
          if (lw != no_step && lw != i && !ordered(lw, i)) return race(lw, true, i, true, st.dst, k);
          for (auto node = reads[x]; node != no_step; node = read_nodes_[node].second) {
            const auto reader = read_nodes_[node].first;
            if (reader != i && !ordered(reader, i)) return race(reader, false, i, true, st.dst, k);
          }
          last_write[x] = std::uint32_t(i);
          reads[x] = no_step;
        }
      }
    }
    return true;
  }

  // --- c2) races across ranks ----------------------------------------------------------
  // A write lands in its target's memory at some moment between its start and the
  // arrival of its flag. Every step of the target that touches those bytes must be
  // ordered after the wait that counts the flag, or must have completed before the
  // write started, through any chain of cause and effect across ranks; two writes
  // landing on the same bytes must be ordered the same way. Happens-before is the
  // transitive closure of a global DAG: local deps; a send or recv's partner precedes
  // the steps that depend on it (the data has been read or written by then); a write or
  // notify precedes the wait that counts its flag. Only the steps that take part in a
  // question get a bit ("interesting" steps), so the closure stays small.
  bool check_landing_races() {
    const auto total = offsets_.back();
    // Landed elements of each rank, as CSR lists of the writes landing there, over the
    // rank's flat element index (input, output, scratch arrays back to back).
    const auto flat_base = [&](int r) {
      const auto& l = layouts_[std::size_t(r)];
      return std::array<std::size_t, 3>{0, l.elems[0], l.elems[0] + l.elems[1]};
    };
    const auto flat = [&](int r, const region& rg) {
      const auto& l = layouts_[std::size_t(r)];
      return flat_base(r)[std::size_t(l.array[std::size_t(rg.where)])] + first_elem(r, rg);
    };
    std::vector<std::vector<std::uint32_t>> land_begin(static_cast<std::size_t>(p_)), land(static_cast<std::size_t>(p_));
    for (int t = 0; t < p_; ++t) {
      const auto& l = layouts_[std::size_t(t)];
      land_begin[std::size_t(t)].assign(l.elems[0] + l.elems[1] + l.elems[2] + 1, 0);
    }
    std::vector<std::uint32_t> writes;
    for (std::uint32_t g = 0; g < total; ++g) {
      const auto r = int(rank_of_[g]);
      const auto& st = at(r, g - offsets_[std::size_t(r)]);
      if (st.kind != step_kind::write) continue;
      writes.push_back(g);
      auto& b = land_begin[std::size_t(st.peer)];
      const auto first = flat(st.peer, st.dst);
      for (std::size_t k = 0; k < st.dst.bytes / es_; ++k) ++b[first + k + 1];
    }
    for (int t = 0; t < p_; ++t) {
      auto& b = land_begin[std::size_t(t)];
      for (std::size_t x = 0; x + 1 < b.size(); ++x) b[x + 1] += b[x];
      land[std::size_t(t)].assign(b.back(), no_step);
    }
    {
      std::vector<std::vector<std::uint32_t>> fill(static_cast<std::size_t>(p_));
      for (int t = 0; t < p_; ++t)
        fill[std::size_t(t)].assign(land_begin[std::size_t(t)].begin(), land_begin[std::size_t(t)].end() - 1);
      for (const auto g : writes) {
        const auto r = int(rank_of_[g]);
        const auto& st = at(r, g - offsets_[std::size_t(r)]);
        const auto first = flat(st.peer, st.dst);
        for (std::size_t k = 0; k < st.dst.bytes / es_; ++k)
          land[std::size_t(st.peer)][fill[std::size_t(st.peer)][first + k]++] = g;
      }
    }

    // Interesting steps: writes, the waits that count their flags, and every step that
    // touches landed bytes of its own rank.
    const auto touches_landed = [&](int t, const region& rg) {
      const auto first = flat(t, rg);
      const auto& b = land_begin[std::size_t(t)];
      for (std::size_t k = 0; k < rg.bytes / es_; ++k)
        if (b[first + k + 1] != b[first + k]) return true;
      return false;
    };
    std::vector<std::uint32_t> bit(total, no_step);
    std::uint32_t interesting = 0;
    for (std::uint32_t g = 0; g < total; ++g) {
      const auto r = int(rank_of_[g]);
      const auto& st = at(r, g - offsets_[std::size_t(r)]);
      const bool take = st.kind == step_kind::write || (st.kind == step_kind::wait && incoming_[g] != 0) ||
                        (reads_src(st.kind) && touches_landed(r, st.src)) ||
                        (writes_dst(st.kind) && touches_landed(r, st.dst));
      if (take) bit[g] = interesting++;
    }
    const std::size_t words = (std::size_t(interesting) + 63) / 64;
    if (words && total > (std::size_t(1) << 26) / words)
      return fail("group is too large to check races across ranks (" + std::to_string(total) + " steps, " +
                  std::to_string(interesting) + " of them around one-sided writes)");

    // The global DAG's edges, u -> v, as successor lists; Kahn's order; then every
    // step's set of interesting ancestors.
    std::vector<std::uint32_t> begin(total + 1, 0), succ;
    const auto for_each_edge = [&](auto&& edge) {
      for (std::uint32_t v = 0; v < total; ++v) {
        const auto r = int(rank_of_[v]);
        for (step_id d : at(r, v - offsets_[std::size_t(r)]).deps) {
          const auto u = std::uint32_t(offsets_[std::size_t(r)] + d);
          edge(u, v);
          if (partner_[u] != no_step) edge(partner_[u], v);
        }
      }
      for (std::uint32_t u = 0; u < total; ++u)
        if (flag_wait_[u] != no_step) edge(u, flag_wait_[u]);
    };
    for_each_edge([&](std::uint32_t u, std::uint32_t) { ++begin[u + 1]; });
    for (std::size_t g = 0; g < total; ++g) begin[g + 1] += begin[g];
    succ.resize(begin[total]);
    std::vector<std::uint32_t> indegree(total, 0);
    {
      std::vector<std::uint32_t> fill(begin.begin(), begin.end() - 1);
      for_each_edge([&](std::uint32_t u, std::uint32_t v) {
        succ[fill[u]++] = v;
        ++indegree[v];
      });
    }
    std::vector<std::uint64_t> anc(total * words, 0);
    std::vector<std::uint32_t> order;
    order.reserve(total);
    for (std::uint32_t g = 0; g < total; ++g)
      if (indegree[g] == 0) order.push_back(g);
    for (std::size_t k = 0; k < order.size(); ++k) {
      const auto u = order[k];
      const std::uint64_t* from = anc.data() + std::size_t(u) * words;
      for (auto e = begin[u]; e < begin[u + 1]; ++e) {
        const auto v = succ[e];
        std::uint64_t* row = anc.data() + std::size_t(v) * words;
        for (std::size_t w = 0; w < words; ++w) row[w] |= from[w];
        if (bit[u] != no_step) row[bit[u] / 64] |= std::uint64_t(1) << (bit[u] % 64);
        if (--indegree[v] == 0) order.push_back(v);
      }
    }
    // A cycle means a deadlock, which the simulation reports with its blocked steps.
    const auto before = [&](std::uint32_t u, std::uint32_t v) {  // u completes before v starts
      return bit[u] != no_step && (anc[std::size_t(v) * words + bit[u] / 64] >> (bit[u] % 64) & 1) != 0;
    };

    for (const auto w1 : writes) {
      const auto r = int(rank_of_[w1]);
      const auto& st = at(r, w1 - offsets_[std::size_t(r)]);
      const int t = st.peer;
      const auto first = flat(t, st.dst);
      const auto& b = land_begin[std::size_t(t)];
      for (std::size_t k = 0; k < st.dst.bytes / es_; ++k)
        for (auto e = b[first + k]; e < b[first + k + 1]; ++e) {
          const auto w2 = land[std::size_t(t)][e];
          if (w2 <= w1 || before(w1, w2) || before(w2, w1)) continue;
          return fail("race across ranks on rank " + std::to_string(t) + " at " + byte_at(st.dst, k) + ": " +
                      where(w1) + " and " + where(w2) + " both land there, and neither is ordered before the other");
        }
    }
    for (int t = 0; t < p_; ++t) {
      const auto& steps = group_[std::size_t(t)].steps;
      const auto& b = land_begin[std::size_t(t)];
      for (std::size_t i = 0; i < steps.size(); ++i) {
        const auto x = std::uint32_t(offsets_[std::size_t(t)] + i);
        if (bit[x] == no_step) continue;
        const auto& st = steps[i];
        for (const bool is_write : {false, true}) {
          if (is_write ? !writes_dst(st.kind) : !reads_src(st.kind)) continue;
          const region& rg = is_write ? st.dst : st.src;
          const auto first = flat(t, rg);
          for (std::size_t k = 0; k < rg.bytes / es_; ++k)
            for (auto e = b[first + k]; e < b[first + k + 1]; ++e) {
              const auto w = land[std::size_t(t)][e];
              if (before(x, w) || before(flag_wait_[w], x)) continue;
              return fail("race across ranks on rank " + std::to_string(t) + " at " + byte_at(rg, k) + ": " + where(w) +
                          " lands there and " + where(t, i) + (is_write ? " writes" : " reads") +
                          " it, but it is neither ordered after " + where(flag_wait_[w]) +
                          ", which counts the write's flag, nor complete before the write starts" +
                          (options_.in_place ? " (in place: input and output are one memory)" : ""));
            }
        }
      }
    }
    return true;
  }

  // --- d) symbolic execution -----------------------------------------------------------
  bool load(int r, const region& rg, std::size_t i, std::vector<value>& into) {
    const auto& a = array_of(r, rg.where);
    const auto first = first_elem(r, rg), n = rg.bytes / es_;
    into.assign(a.begin() + std::ptrdiff_t(first), a.begin() + std::ptrdiff_t(first + n));
    for (std::size_t k = 0; k < n; ++k)
      if (!into[k].defined)
        return fail(where(r, i) + ": reads data before it is produced (" + byte_at(rg, k) + " was never written)");
    return true;
  }

  /// into[k] = combine(into[k], other[k]) for the step `i` of rank `r` writing `dst`.
  bool combine(int r, std::size_t i, const region& dst, std::vector<value>& into, const std::vector<value>& other) {
    // Neighbouring elements of a chunk usually pair the same sets: skip the map then.
    std::uint32_t last_a = no_step, last_b = no_step;
    std::int64_t last_u = 0;
    for (std::size_t k = 0; k < into.size(); ++k) {
      auto &a = into[k];
      const auto& b = other[k];
      if (a.origin != b.origin)
        return fail(where(r, i) + ": combines values of different elements at " + byte_at(dst, k) + ": origin " +
                    std::to_string(a.origin) + " with origin " + std::to_string(b.origin));
      if (a.finalized || b.finalized)
        return fail(where(r, i) + ": reduces data that is already finalized at " + byte_at(dst, k));
      if (a.set != last_a || b.set != last_b) last_u = sets_->unite(last_a = a.set, last_b = b.set);
      const auto u = last_u;
      if (u < 0)
        return fail(where(r, i) + ": counts rank " + std::to_string(-1 - u) + " twice at " + byte_at(dst, k) +
                    " (" + sets_->describe(a.set) + " + " + sets_->describe(b.set) + ")");
      a.set = std::uint32_t(u);
    }
    return true;
  }

  void store(int r, const region& rg, const std::vector<value>& from) {
    std::copy(from.begin(), from.end(), array_of(r, rg.where).begin() + std::ptrdiff_t(first_elem(r, rg)));
  }

  /// Applies step i of rank r (a local step, or the receiving side of a matched pair).
  bool execute(int r, std::size_t i) {
    const auto& st = at(r, i);
    switch (st.kind) {
      case step_kind::send: return true;
      case step_kind::copy:
        if (!load(r, st.src, i, a_)) return false;
        store(r, st.dst, a_);
        return true;
      case step_kind::reduce:
        if (!load(r, st.dst, i, a_) || !load(r, st.src, i, b_) || !combine(r, i, st.dst, a_, b_)) return false;
        store(r, st.dst, a_);
        return true;
      case step_kind::finalize:
        if (!load(r, st.dst, i, a_)) return false;
        for (auto& v : a_) ++v.finalized;
        store(r, st.dst, a_);
        return true;
      case step_kind::reduce_slots: {
        if (!load(r, st.dst, i, a_)) return false;
        for (std::size_t k = 0; st.dst.bytes && k < st.src.bytes / st.dst.bytes; ++k) {
          const region slot{st.src.where, st.src.offset + k * st.dst.bytes, st.dst.bytes};
          if (!load(r, slot, i, b_) || !combine(r, i, st.dst, a_, b_)) return false;
        }
        store(r, st.dst, a_);
        return true;
      }
      case step_kind::write:
        // The data lands when the write completes, before the target's wait can.
        if (!load(r, st.src, i, a_)) return false;
        store(st.peer, st.dst, a_);
        return true;
      case step_kind::notify:
      case step_kind::wait:
        return true;
      case step_kind::recv:
      case step_kind::recv_reduce: {
        const auto sender = st.peer;
        const auto send_step = partner_[offsets_[std::size_t(r)] + i] - offsets_[std::size_t(sender)];
        if (!load(sender, at(sender, send_step).src, send_step, b_)) return false;
        if (st.kind == step_kind::recv_reduce) {
          if (!load(r, st.src, i, a_) || !combine(r, i, st.dst, a_, b_)) return false;
          store(r, st.dst, a_);
        } else {
          store(r, st.dst, b_);
        }
        return true;
      }
    }
    return true;
  }

  void complete(std::uint32_t g, std::vector<std::uint32_t>& work) {
    done_[g] = 1;
    ++completed_;
    for (auto k = succ_begin_[g]; k < succ_begin_[g + 1]; ++k)
      if (--pending_[succ_[k]] == 0) work.push_back(succ_[k]);
    if (const auto w = flag_wait_[g]; w != no_step && --pending_[w] == 0) work.push_back(w);
  }

  bool simulate() {
    const auto total = offsets_.back();
    sets_.emplace(p_);
    // Global step g of rank r is offsets_[r] + i; successor lists over global ids.
    pending_.assign(total, 0);
    succ_begin_.assign(total + 1, 0);
    for (int r = 0; r < p_; ++r) {
      const auto& steps = group_[std::size_t(r)].steps;
      for (std::size_t i = 0; i < steps.size(); ++i) {
        const auto g = offsets_[std::size_t(r)] + i;
        // A wait also needs every flag it counts: writes and notifies complete (and
        // land their data) as soon as their deps have.
        pending_[g] = std::uint32_t(steps[i].deps.size()) + incoming_[g];
        for (step_id d : steps[i].deps) ++succ_begin_[offsets_[std::size_t(r)] + d + 1];
      }
    }
    for (std::size_t g = 0; g < total; ++g) succ_begin_[g + 1] += succ_begin_[g];
    succ_.resize(succ_begin_[total]);
    {
      std::vector<std::size_t> fill(succ_begin_.begin(), succ_begin_.end() - 1);
      for (int r = 0; r < p_; ++r) {
        const auto& steps = group_[std::size_t(r)].steps;
        for (std::size_t i = 0; i < steps.size(); ++i)
          for (step_id d : steps[i].deps)
            succ_[fill[offsets_[std::size_t(r)] + d]++] = std::uint32_t(offsets_[std::size_t(r)] + i);
      }
    }

    // Input elements carry their own index and their rank; output and scratch start
    // undefined (in place, output shows the input where they overlap).
    memory_.assign(std::size_t(p_) * 3, {});
    for (int r = 0; r < p_; ++r) {
      const auto& l = layouts_[std::size_t(r)];
      for (int a = 0; a < 3; ++a) memory_[std::size_t(r) * 3 + std::size_t(a)].resize(l.elems[a]);
      if (desc_.kind == collective::broadcast && r != desc_.root) continue;  // input read on root only
      auto& in = array_of(r, buffer::input);
      for (std::size_t e = 0; e < desc_.input_bytes() / es_; ++e)
        in[l.base[0] + e] = {std::uint32_t(e), rank_sets::singleton(r), 0, true};
    }

    done_.assign(total, 0);
    ready_.assign(total, 0);
    completed_ = 0;
    std::vector<std::uint32_t> work;
    for (std::uint32_t g = 0; g < total; ++g)
      if (pending_[g] == 0) work.push_back(g);
    while (!work.empty()) {
      const auto g = work.back();
      work.pop_back();
      const auto r = int(rank_of_[g]);
      const auto i = g - offsets_[std::size_t(r)];
      const auto kind = at(r, i).kind;
      if (!is_communication(kind)) {
        if (!execute(r, i)) return false;
        complete(g, work);
        continue;
      }
      // Rendezvous: a send is posted once its deps are done; the receive completes when
      // its own deps are done and the send is posted, and the send completes with it.
      ready_[g] = 1;
      const auto other = partner_[g];
      if (!ready_[other]) continue;
      const auto recv_g = kind == step_kind::send ? other : g;
      const auto rr = int(rank_of_[recv_g]);
      if (!execute(rr, recv_g - offsets_[std::size_t(rr)])) return false;
      complete(g, work);
      complete(other, work);
    }
    return completed_ == total || deadlock();
  }

  bool deadlock() {
    const auto total = offsets_.back();
    std::string blocked;
    std::size_t listed = 0, frontier = 0;
    for (std::uint32_t g = 0; g < total; ++g) {
      if (done_[g] || !ready_[g]) continue;
      ++frontier;
      if (listed == 8) continue;
      ++listed;
      const auto r = int(rank_of_[g]), pr = int(rank_of_[partner_[g]]);
      const auto i = g - offsets_[std::size_t(r)], pi = partner_[g] - offsets_[std::size_t(pr)];
      blocked += "\n  " + where(r, i) + " waits for " + where(pr, pi) + ", which waits for its deps";
    }
    for (std::uint32_t g = 0; g < total; ++g) {
      if (done_[g] || incoming_[g] == 0) continue;
      const auto r = int(rank_of_[g]);
      const auto i = g - offsets_[std::size_t(r)];
      std::uint32_t deps_left = 0;
      for (step_id d : at(r, i).deps) deps_left += done_[offsets_[std::size_t(r)] + d] ? 0 : 1;
      if (deps_left) continue;  // blocked by its own rank, listed through the steps before it
      ++frontier;
      if (listed == 8) continue;
      ++listed;
      std::string missing;
      for (std::uint32_t w = 0; w < total; ++w)
        if (flag_wait_[w] == g && !done_[w]) missing += (missing.empty() ? "" : "; ") + where(w);
      blocked += "\n  " + where(r, i) + " waits for flags of " + missing + ", which wait(s) for their deps";
    }
    if (frontier > listed) blocked += "\n  ... and " + std::to_string(frontier - listed) + " more";
    return fail("deadlock: " + std::to_string(total - completed_) + " of " + std::to_string(total) +
                " steps can never complete; blocked:" + blocked);
  }

  // --- e) result -----------------------------------------------------------------------
  bool check_result() {
    const auto count = desc_.count;
    const auto out_elems = desc_.output_bytes() / es_;
    const bool reduces = desc_.kind == collective::allreduce || desc_.kind == collective::reduce_scatter;
    for (int r = 0; r < p_; ++r) {
      const auto& a = array_of(r, buffer::output);
      const auto base = layouts_[std::size_t(r)].base[std::size_t(buffer::output)];
      for (std::size_t e = 0; e < out_elems; ++e) {
        const auto& v = a[base + e];
        const auto what = [&] {
          return "rank " + std::to_string(r) + " output element " + std::to_string(e) + " (output byte " +
                 std::to_string(e * es_) + ")";
        };
        if (!v.defined) return fail(what() + " is never written");
        std::size_t origin = e;
        int only = -1;  // the one rank expected, or -1 for all ranks
        switch (desc_.kind) {
          case collective::allreduce: break;
          case collective::reduce_scatter: origin = std::size_t(r) * count + e; break;
          case collective::allgather:
            origin = e % count;
            only = int(e / count);
            break;
          case collective::broadcast: only = desc_.root; break;
        }
        const int want_final = reduces ? 1 : 0;
        const bool set_ok = only < 0 ? sets_->count(v.set) == p_
                                     : sets_->count(v.set) == 1 && sets_->contains(v.set, only);
        if (v.origin == origin && set_ok && v.finalized == want_final) continue;
        return fail(what() + ": " + std::string(to_string(desc_.kind)) + " expects origin " + std::to_string(origin) +
                    ", ranks " + (only < 0 ? "all " + std::to_string(p_) : "{" + std::to_string(only) + "}") +
                    ", finalized " + (reduces ? "once" : "0 times") + "; got origin " +
                    std::to_string(v.origin) + ", ranks " + sets_->describe(v.set) + ", finalized " +
                    std::to_string(v.finalized) + " times");
      }
    }
    return true;
  }

  std::span<const schedule> group_;
  verify_options options_;
  std::string message_;
  descriptor desc_{};
  int p_ = 0;
  std::size_t es_ = 1;
  std::vector<std::size_t> offsets_;   // rank r's steps are global ids [offsets_[r], offsets_[r+1])
  std::vector<layout> layouts_;
  std::vector<std::uint32_t> rank_of_;  // of each global step id
  std::vector<message> messages_;
  std::vector<std::uint32_t> partner_;  // global id of the matching send/recv
  bool one_sided_ = false;                // the group has writes or notifies
  std::vector<std::uint32_t> flag_wait_;  // of a write/notify: the global id of the wait counting its flag
  std::vector<std::uint32_t> incoming_;   // of a wait: how many flags it counts
  // races (one rank at a time)
  std::vector<std::uint64_t> reach_;
  std::vector<std::uint32_t> last_write_, reads_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> read_nodes_;  // (step, next) lists
  // simulation
  std::optional<rank_sets> sets_;
  std::vector<std::vector<value>> memory_;  // rank r's arrays at [3r, 3r+3)
  std::vector<std::uint32_t> pending_, succ_;
  std::vector<std::size_t> succ_begin_;
  std::vector<std::uint8_t> done_, ready_;
  std::size_t completed_ = 0;
  std::vector<value> a_, b_;
};

}  // namespace detail

/// Proves a group of schedules (group[r] is rank r's) against its descriptor:
///  a) structure: one descriptor, regions inside their buffers and element-aligned,
///     peers in range, deps earlier, successor lists consistent;
///  b) every send meets exactly one recv/recv_reduce with the same tag and bytes; every
///     write/notify meets the one wait on its peer with its tag, whose count is the
///     number of flags raised there;
///  c) no two unordered steps of a rank touch the same bytes unless both only read, and
///     every step touching bytes a write lands in is ordered after the wait counting its
///     flag or before the write, across ranks (happens-before over sends, recvs, flags);
///  d) the group runs to completion under rendezvous semantics (writes and notifies
///     never block; a wait completes once its flags have arrived), never reads unwritten
///     data and never counts a contribution twice;
///  e) every output element holds what the collective promises, finalized once if reduced.
/// Reports the first problem. A pure function: safe to call from any thread.
[[nodiscard]] inline verify_result verify(std::span<const schedule> group, verify_options options = {}) {
  return detail::verifier(group, options).run();
}

/// verify(), throwing mimatrix::error(errc::invalid_argument) with the message on failure.
inline void verify_or_throw(std::span<const schedule> group, verify_options options = {}) {
  if (auto result = verify(group, options); !result) throw error(errc::invalid_argument, result.message);
}

}  // namespace mimatrix::schedule
