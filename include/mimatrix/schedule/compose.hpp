// Composing schedules: embedding a schedule built for a subgroup (one node, one rail)
// into the builder of a schedule for the whole group, so that composed algorithms
// (hierarchical, and later others) reuse the flat algorithms phase by phase.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::schedule {

/// Where the bytes of one sub-schedule buffer lie in the host schedule's buffers: a list
/// of segments, each a byte range of the sub buffer placed at an offset of a host buffer.
/// One segment is a plain shift (`region_map::at`); several place blocks apart, e.g. the
/// blocks of the ranks of one node, which need not be neighbours in the group's buffer.
///
/// A region translates when it lies inside one segment (neighbouring segments that are
/// also neighbours in the host buffer are merged, so they count as one); `embed` stages a
/// buffer whose sub-schedule issues regions across segments through contiguous scratch.
///
/// @par Thread Safety
/// A value type: distinct objects may be used from any threads; const use is safe.
class region_map {
 public:
  struct segment {
    std::size_t from = 0;   // first byte in the sub buffer
    std::size_t bytes = 0;  // length; unbounded() for "to the end"
    buffer where = buffer::output;
    std::size_t offset = 0;  // first byte in the host buffer
  };

  static constexpr std::size_t unbounded() { return std::numeric_limits<std::size_t>::max(); }

  region_map() = default;

  /// The whole sub buffer, shifted to `offset` bytes into host buffer `where`.
  static region_map at(buffer where, std::size_t offset) {
    region_map m;
    m.segments_.push_back({0, unbounded(), where, offset});
    return m;
  }

  /// Sub bytes [from, from + bytes) to host `where` at `offset`. Segments are added in
  /// increasing `from`, without overlap.
  region_map& place(std::size_t from, std::size_t bytes, buffer where, std::size_t offset) {
    if (!segments_.empty()) {
      auto& last = segments_.back();
      if (last.bytes == unbounded() || from < last.from + last.bytes)
        throw error(errc::invalid_argument, "schedule::region_map: segment at sub byte " + std::to_string(from) +
                                                " overlaps or precedes the previous one");
      // Contiguous on both sides: one segment, so regions may span the seam.
      if (from == last.from + last.bytes && where == last.where && offset == last.offset + last.bytes) {
        last.bytes = bytes == unbounded() ? unbounded() : last.bytes + bytes;
        return *this;
      }
    }
    segments_.push_back({from, bytes, where, offset});
    return *this;
  }

  bool empty() const { return segments_.empty(); }
  const std::vector<segment>& segments() const { return segments_; }

  /// Whether sub region `r` translates: inside one segment, or empty.
  bool holds(const region& r) const { return find(r) != nullptr || (r.bytes == 0 && !segments_.empty()); }

  /// Whether the segments cover sub bytes [0, end) without a gap.
  bool covers(std::size_t end) const {
    std::size_t next = 0;
    for (const auto& s : segments_) {
      if (s.from != next) return false;
      if (s.bytes == unbounded() || s.from + s.bytes >= end) return true;
      next = s.from + s.bytes;
    }
    return end == 0;
  }

  /// The host region of sub region `r`, or an error naming it when no one segment holds
  /// it. Empty regions (unused fields of a step) map to the first segment's start.
  region operator()(const region& r) const {
    if (const segment* s = find(r)) return {s->where, s->offset + (r.offset - s->from), r.bytes};
    if (r.bytes == 0 && !segments_.empty()) return {segments_.front().where, segments_.front().offset, 0};
    throw error(errc::invalid_argument, "schedule::region_map: sub-schedule region " + to_string(r) +
                                            " does not lie inside one segment of the map (" +
                                            std::to_string(segments_.size()) + " segments)");
  }

 private:
  const segment* find(const region& r) const {
    for (const auto& s : segments_) {
      if (r.offset < s.from) break;
      const auto into = r.offset - s.from;
      if (s.bytes == unbounded() || (into <= s.bytes && r.bytes <= s.bytes - into)) return &s;
    }
    return nullptr;
  }

  std::vector<segment> segments_;
};

/// Sub tag t becomes t·stride + offset. Embeddings whose messages may share a (sender,
/// receiver) pair use one stride and distinct offsets below it: their tags are then
/// disjoint without knowing how many tags each uses (which differs from rank to rank),
/// and every rank computes the same map.
struct tag_map {
  std::uint32_t stride = 1;
  std::uint32_t offset = 0;

  std::uint32_t operator()(std::uint32_t tag) const {
    const auto t = std::uint64_t(tag) * stride + offset;
    if (t > std::numeric_limits<std::uint32_t>::max())
      throw error(errc::invalid_argument, "schedule::tag_map: sub tag " + std::to_string(tag) + " times stride " +
                                              std::to_string(stride) + " plus " + std::to_string(offset) +
                                              " does not fit a 32-bit tag");
    return static_cast<std::uint32_t>(t);
  }
};

/// How one sub-schedule is placed into the host schedule.
struct embedding {
  /// ranks[k] is the host rank of sub-rank k; ranks[sub.rank] must be the host's rank.
  std::vector<int> ranks;
  region_map input, output;
  /// Left empty: a fresh slice of the host's scratch, as long as the sub-schedule needs.
  region_map scratch;
  tag_map tags;
  /// A sub-schedule that computes a partial result (say, the intra-node reduce-scatter of
  /// a hierarchical allreduce) must not finalize it: only the last phase may apply
  /// avg's 1/p. Dropped steps pass their dependencies on to their dependents.
  bool keep_finalize = true;
};

namespace detail {

inline void sort_unique(std::vector<step_id>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

inline bool reads(step_kind k) { return k != step_kind::recv && k != step_kind::finalize; }
inline bool writes(step_kind k) { return k != step_kind::send; }

/// Sub bytes [0, end) of a buffer whose map is scattered, placed back to back in host
/// scratch at `offset`.
struct staging {
  region_map map;
  std::size_t end = 0;
  std::size_t offset = 0;
};

/// A staging for sub buffer `which` when `sub` issues a region there across segments of
/// `map` that cover it; none when every region translates (or the map has a gap there,
/// which translation then reports).
inline std::optional<staging> stage(builder& host, const schedule& sub, buffer which, const region_map& map) {
  std::size_t end = 0;
  bool fits = true;
  const auto visit = [&](const region& r) {
    if (r.where != which || r.bytes == 0) return;
    end = std::max(end, r.offset + r.bytes);
    fits = fits && map.holds(r);
  };
  for (const auto& st : sub.steps) {
    if (reads(st.kind)) visit(st.src);
    if (writes(st.kind)) visit(st.dst);
  }
  if (fits || !map.covers(end)) return std::nullopt;
  return staging{map, end, host.scratch(end).offset};
}

/// Copies every segment of a staging into scratch (`inward`) or back out, after `deps`.
inline std::vector<step_id> copy_staged(builder& host, const staging& s, bool inward,
                                        const std::vector<step_id>& deps) {
  std::vector<step_id> copies;
  for (const auto& seg : s.map.segments()) {
    if (seg.from >= s.end) break;
    const auto bytes = std::min(seg.bytes, s.end - seg.from);
    const region placed{seg.where, seg.offset, bytes}, staged{buffer::scratch, s.offset + seg.from, bytes};
    copies.push_back(host.add(step_kind::copy, -1, 0, inward ? placed : staged, inward ? staged : placed, deps));
  }
  return copies;
}

}  // namespace detail

/// Appends `sub` (one sub-rank's schedule of a subgroup) to `host`, translated by `how`:
/// peers through the rank map, regions through the region maps, tags through the tag
/// map. Steps without dependencies in `sub` start after every step in `after`. Returns
/// the exit steps, those no other step of `sub` depends on, so a later phase can depend on
/// the whole of this one (an empty sub-schedule returns `after`).
///
/// Copies that land on their own source once translated do nothing and are left out, as
/// are finalize steps unless `how.keep_finalize`.
///
/// When `sub` issues a region across segments of its input or output map (recursive
/// doubling's fold sends the whole gathered buffer, which on a rail lies in blocks a node
/// apart), that buffer runs in contiguous host scratch: input copied in before the first
/// step, output copied out after the last. Maps it fits cost nothing.
///
/// Throws mimatrix::error (invalid_argument) when the rank map does not fit `sub`, a
/// region falls outside its map, a tag overflows, or a step kind is one compose does not
/// know how to translate.
///
/// @par Thread Safety
/// Touches only `host`: distinct builders may be composed into from different threads.
inline std::vector<step_id> embed(builder& host, const schedule& sub, const embedding& how,
                                  std::span<const step_id> after = {}) {
  const auto sub_size = sub.desc.size;
  if (static_cast<int>(how.ranks.size()) != sub_size)
    throw error(errc::invalid_argument, "schedule::embed: the rank map lists " + std::to_string(how.ranks.size()) +
                                            " ranks but the " + sub.algorithm + " sub-schedule is for " +
                                            std::to_string(sub_size));
  if (sub.rank < 0 || sub.rank >= sub_size || how.ranks[std::size_t(sub.rank)] != host.rank())
    throw error(errc::invalid_argument, "schedule::embed: sub-rank " + std::to_string(sub.rank) + " of the " +
                                            sub.algorithm + " sub-schedule is not host rank " +
                                            std::to_string(host.rank()) + " in the rank map");
  for (int g : how.ranks)
    if (g < 0 || g >= host.size())
      throw error(errc::invalid_argument, "schedule::embed: the rank map names rank " + std::to_string(g) +
                                              ", outside a group of " + std::to_string(host.size()));

  region_map input = how.input, output = how.output;
  std::vector<step_id> start(after.begin(), after.end());
  if (const auto staged = detail::stage(host, sub, buffer::input, input)) {
    start = detail::copy_staged(host, *staged, true, start);
    input = region_map::at(buffer::scratch, staged->offset);
  }
  const auto staged_output = detail::stage(host, sub, buffer::output, output);
  if (staged_output) output = region_map::at(buffer::scratch, staged_output->offset);
  region_map scratch = how.scratch;
  if (scratch.empty()) scratch = region_map::at(buffer::scratch, host.scratch(sub.scratch_bytes).offset);
  const auto translate = [&](const region& r) {
    switch (r.where) {
      case buffer::input: return input(r);
      case buffer::output: return output(r);
      case buffer::scratch: return scratch(r);
    }
    return r;
  };

  // done[i]: the host steps whose completion stands for sub step i's (itself, or for a
  // dropped step what it waited for).
  std::vector<std::vector<step_id>> done(sub.steps.size());
  std::vector<step_id> deps;
  for (std::size_t i = 0; i < sub.steps.size(); ++i) {
    const auto& st = sub.steps[i];
    if (st.kind > step_kind::finalize)
      throw error(errc::invalid_argument, "schedule::embed: step " + std::to_string(i) + " of the " + sub.algorithm +
                                              " sub-schedule has kind " + std::to_string(int(st.kind)) +
                                              ", which compose cannot translate yet");
    deps.clear();
    const auto sub_deps = sub.deps(step_id(i));
    if (sub_deps.empty()) deps = start;
    for (step_id d : sub_deps) deps.insert(deps.end(), done[d].begin(), done[d].end());
    detail::sort_unique(deps);

    const region src = detail::reads(st.kind) ? translate(st.src) : st.src;
    const region dst = detail::writes(st.kind) ? translate(st.dst) : st.dst;
    const bool no_op = (st.kind == step_kind::copy && src == dst) ||
                       (st.kind == step_kind::finalize && !how.keep_finalize);
    if (no_op) {
      done[i] = deps;
      continue;
    }
    const bool talks = is_communication(st.kind);
    const int peer = talks ? how.ranks.at(std::size_t(st.peer)) : st.peer;
    const std::uint32_t tag = talks ? how.tags(st.tag) : st.tag;
    done[i] = {host.add(st.kind, peer, tag, src, dst, deps)};
  }

  std::vector<bool> awaited(sub.steps.size());
  for (step_id d : sub.dep_ids) awaited[d] = true;
  std::vector<step_id> exits;
  for (std::size_t i = 0; i < sub.steps.size(); ++i)
    if (!awaited[i]) exits.insert(exits.end(), done[i].begin(), done[i].end());
  if (sub.steps.empty()) exits = start;
  detail::sort_unique(exits);
  if (staged_output) exits = detail::copy_staged(host, *staged_output, false, exits);
  return exits;
}

}  // namespace mimatrix::schedule
