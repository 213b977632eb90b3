// The verifier's first layer: the group's structure (check a of verify()), and the state
// every later layer reads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/verify/symbols.hpp"

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

class structure_check {
 public:
  structure_check(std::span<const schedule> group, verify_options options) : group_(group), options_(options) {}

 protected:
  // --- helpers -------------------------------------------------------------------------
  bool fail(std::string message) {
    message_ = std::move(message);
    return false;
  }
  /// Rank `rank`'s descriptor: rank 0's, but for a v-form's layout, which is each rank's own.
  const descriptor& desc_of(int rank) const { return group_[std::size_t(rank)].desc; }
  const step& at(int rank, std::size_t i) const { return group_[std::size_t(rank)].steps[i]; }
  std::span<const step_id> deps_of(int rank, std::size_t i) const {
    return group_[std::size_t(rank)].deps(step_id(i));
  }
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
      case buffer::input: return desc_of(rank).input_bytes(rank);
      case buffer::output: return desc_of(rank).output_bytes(rank);
      case buffer::scratch: return group_[std::size_t(rank)].scratch_bytes;
      default: return group_[std::size_t(rank)].entry_bytes[entry_index(b)];
    }
  }
  std::size_t first_elem(int rank, const region& r) const {
    const auto& l = layouts_[std::size_t(rank)];
    return l.base[std::size_t(r.where)] + r.offset / es_;
  }
  std::string byte_at(const region& r, std::size_t k) const {
    return std::string(to_string(r.where)) + " byte " + std::to_string(r.offset + k * es_);
  }

  // --- a) structure --------------------------------------------------------------------
  /// `owner` is whose buffer the region is in: the rank itself, or a write's peer.
  bool check_region(int rank, std::size_t i, const region& r, const char* role, int owner = -1) {
    if (owner < 0) owner = rank;
    const auto b = static_cast<std::size_t>(r.where);
    if (b > 2 && (!is_entry(r.where) || entry_index(r.where) >= group_[std::size_t(owner)].entry_bytes.size()))
      return fail(where(rank, i) + ": " + role + " names an unknown buffer");
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
    if (options_.in_place && !desc_.may_run_in_place())
      return fail("descriptor (" + to_string(desc_) + ") never runs in place");
    if (has_root(desc_.kind) && (desc_.root < 0 || desc_.root >= p_))
      return fail("descriptor (" + to_string(desc_) + ") has root out of range");
    constexpr auto max_elems = std::size_t(std::numeric_limits<std::uint32_t>::max());
    if (desc_.largest_bytes() / es_ >= max_elems)
      return fail("descriptor (" + to_string(desc_) + ") is too large to verify symbolically");

    offsets_.assign(std::size_t(p_) + 1, 0);
    layouts_.assign(std::size_t(p_), {});
    for (int r = 0; r < p_; ++r) {
      const auto& s = group_[std::size_t(r)];
      descriptor same = s.desc;  // a v-form's layout is each rank's view of the call
      if (same.layout && desc_.layout) same.layout = desc_.layout;
      if (!(same == desc_))
        return fail("rank " + std::to_string(r) + ": descriptor (" + to_string(s.desc) + ") differs from rank 0's (" +
                    to_string(desc_) + ")");
      if (s.rank != r)
        return fail("schedule at index " + std::to_string(r) + " says it is rank " + std::to_string(s.rank));
      if (s.steps.size() >= no_step) return fail("rank " + std::to_string(r) + ": too many steps");
      const auto n = s.steps.size();
      if (s.dep_begin.size() != n + 1 || s.dep_begin.front() != 0 || s.dep_begin.back() != s.dep_ids.size() ||
          !std::is_sorted(s.dep_begin.begin(), s.dep_begin.end()))
        return fail("rank " + std::to_string(r) + ": dependency ranges do not cover dep_ids (build schedules with builder)");
      for (std::size_t i = 0; i < n; ++i) {
        const auto& st = s.steps[i];
        if (st.kind > step_kind::reduce_slots) return fail("rank " + std::to_string(r) + " step " + std::to_string(i) + ": unknown step kind");
        for (step_id d : s.deps(step_id(i)))
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
      const auto in = s.desc.input_bytes(r) / es_, out = s.desc.output_bytes(r) / es_;
      if (options_.in_place) {
        l.base[0] = s.desc.in_place_input_offset(r) / es_;
        l.base[1] = s.desc.in_place_output_offset(r) / es_;
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
    for (step_id d : s.dep_ids) ++begin[d + 1];
    for (std::size_t i = 0; i < n; ++i) begin[i + 1] += begin[i];
    const auto bad = "rank " + std::to_string(r) + ": successor lists do not match deps (build schedules with builder)";
    if (s.successor_begin != begin || s.successor_ids.size() != begin[n]) return fail(bad);
    std::vector<step_id> want(begin[n]), got(s.successor_ids);
    auto fill = begin;
    for (step_id i = 0; i < n; ++i)
      for (step_id d : s.deps(i)) want[fill[d]++] = i;
    for (std::size_t i = 0; i < n; ++i)
      std::sort(got.begin() + begin[i], got.begin() + begin[i + 1]);
    return got == want || fail(bad);
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
  bool one_sided_ = false;                // the group has writes or notifies
};

}  // namespace detail
}  // namespace mimatrix::schedule
