// algorithm::bruck: Bruck's alltoall (Bruck et al. 1997, MPICH's small-message alltoall):
// ⌈lg p⌉ messages a rank instead of p-1, for any p, at the price of sending each block
// up to ⌈lg p⌉ times and copying it locally.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/model/cost.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/topology/layout.hpp"

namespace mimatrix::algorithm {

/// Bruck's alltoall on any topology (ranks in rank order), any p.
///
/// 1. Rotate: scratch block i = input block (r+i) % p, the block that must travel i
///    ranks forward.
/// 2. For k = 0..⌈lg p⌉-1: the blocks whose index has bit k set move 2^k ranks forward,
///    in one message (packed into a staging area, unpacked at the same indices), so
///    block i has moved i ranks once every bit of i has been visited.
/// 3. Rotate back: output block (r-i) % p = scratch block i (it came from rank r-i).
///
/// On p = 5 (⌈lg p⌉ = 3), scratch block indices of rank r:
///
///   step 0: to r+1, blocks 1 3     step 1: to r+2, blocks 2 3     step 2: to r+4, block 4
///     0 1 2 3 4                      0 1 2 3 4                      0 1 2 3 4
///       ^   ^                            ^ ^                                ^
///
/// Steps run one after another (a step may send what the one before received); the
/// staging areas are reused, so scratch is p blocks plus twice the largest step's.
/// Not chunked: Bruck is for messages small enough that α dominates.
///
/// Cost: h·α + Σ_k m_k·n/p·β, n the whole input (p blocks), m_k the blocks step k sends
/// (the indices below p with bit k set), h the longest chain of steps each waiting for
/// the one before's arrival; on a power of two ⌈lg p⌉(α + n/2·β). Step k waits for
/// step j < k only where a block has both bits (2^k + 2^j < p), so on other p some
/// start-ups overlap. Plus local copies of about (2 + ⌈lg p⌉)·n bytes, which the model
/// (no memory rate) does not charge.
///
/// @par Thread Safety
/// Immutable: `build` may be called from any number of threads.
class bruck {
 public:
  static constexpr std::string_view name = "bruck";

  static constexpr bool runs(schedule::collective k) { return k == schedule::collective::alltoall; }

  template <topology::layout Topology>
  schedule::schedule build(const Topology& topo, const schedule::descriptor& desc, int rank) const {
    topo.check(desc.size);
    schedule::builder b(desc, rank, name);
    if (!runs(desc.kind)) refuse_collective(name, desc.kind, rank);
    if (desc.count == 0) return std::move(b).build();
    build_alltoall(b);
    return std::move(b).build();
  }

  /// h·α + (the blocks all steps send)·β (see the class); empty for any collective but
  /// alltoall.
  std::optional<double> predict(const model::network& net, const schedule::descriptor& d) const {
    if (!runs(d.kind)) return std::nullopt;
    if (d.size <= 1) return 0.0;
    const double block = static_cast<double>(d.count) * static_cast<double>(d.elem_size);
    std::array<int, 32> chain{};  // chain[k]: the longest chain of steps ending at step k
    int moved = 0, longest = 0;
    for (int k = 0; (1 << k) < d.size; ++k) {
      for_each_run(d.size, k, [&](int, int len) { moved += len; });
      for (int j = 0; j < k; ++j)
        if ((1 << k) + (1 << j) < d.size)
          chain[std::size_t(k)] = std::max(chain[std::size_t(k)], chain[std::size_t(j)]);
      longest = std::max(longest, ++chain[std::size_t(k)]);
    }
    return longest * net.link.alpha + moved * block * net.link.beta;
  }

 private:
  using buffer = schedule::buffer;
  using region = schedule::region;
  using step_id = schedule::step_id;

  /// The runs of indices in [0, p) with bit k set: [start, start + 2^k) from start = 2^k
  /// on, every 2^(k+1), the last one cut at p.
  template <class F>
  static void for_each_run(int p, int k, F&& f) {
    const int dist = 1 << k;
    for (int start = dist; start < p; start += 2 * dist) f(start, std::min(dist, p - start));
  }

  static void build_alltoall(schedule::builder& b) {
    const int p = b.size(), r = b.rank();
    const std::size_t blk = b.desc().count * b.desc().elem_size;
    const auto blocks = [&](region base, int first, int n = 1) {
      return region{base.where, base.offset + static_cast<std::size_t>(first) * blk, static_cast<std::size_t>(n) * blk};
    };
    const region input{buffer::input, 0, b.desc().input_bytes(r)}, output{buffer::output, 0, b.desc().output_bytes(r)};
    if (p == 1) {
      b.reserve(1, 0);
      b.copy(input, output);
      return;
    }
    int steps = 0, staged = 0, runs = 0;  // ⌈lg p⌉; the most blocks one step sends; runs in all
    while ((1 << steps) < p) {
      int moved = 0;
      for_each_run(p, steps, [&](int, int len) {
        moved += len;
        ++runs;
      });
      staged = std::max(staged, moved);
      ++steps;
    }
    // Two rotation copies, a pack and an unpack a run, a send and a receive a step, p
    // copies back; most steps have one or two dependencies.
    b.reserve(2 + 2 * static_cast<std::size_t>(runs + steps) + static_cast<std::size_t>(p),
              4 * static_cast<std::size_t>(runs + steps) + static_cast<std::size_t>(p));
    const region rotated = b.scratch(static_cast<std::size_t>(p) * blk);
    const region out_stage = b.scratch(static_cast<std::size_t>(staged) * blk);
    const region in_stage = b.scratch(static_cast<std::size_t>(staged) * blk);

    // written[i]: the newest step that wrote scratch block i; whatever reads or
    // overwrites the block next waits for it.
    std::vector<step_id> written(static_cast<std::size_t>(p));
    const auto wrote = [&](int first, int n, step_id id) { std::fill_n(written.begin() + first, n, id); };
    wrote(0, p - r, b.copy(blocks(input, r, p - r), blocks(rotated, 0, p - r)));
    if (r > 0) wrote(p - r, r, b.copy(blocks(input, 0, r), blocks(rotated, p - r, r)));

    std::vector<step_id> packs, unpacks, deps;
    step_id sent = 0;
    for (int k = 0; k < steps; ++k) {
      const int dist = 1 << k, to = (r + dist) % p, from = (r - dist + p) % p;
      // Pack after the blocks' last writes, and after the previous send has left the
      // staging area.
      packs.clear();
      int at = 0;
      for_each_run(p, k, [&](int start, int len) {
        deps.assign(written.begin() + start, written.begin() + start + len);
        if (k > 0) deps.push_back(sent);
        std::sort(deps.begin(), deps.end());
        deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
        packs.push_back(
            b.add(schedule::step_kind::copy, -1, 0, blocks(rotated, start, len), blocks(out_stage, at, len), deps));
        at += len;
      });
      // One pair of ranks meets at one step only (2^k < p), so k is a unique tag; the
      // receive waits until the previous step's unpacks have read the staging area.
      const auto tag = static_cast<std::uint32_t>(k);
      sent = b.add(schedule::step_kind::send, to, tag, blocks(out_stage, 0, at), {}, packs);
      const step_id got = b.add(schedule::step_kind::recv, from, tag, {}, blocks(in_stage, 0, at), unpacks);
      // Unpack over the blocks just sent, so after their pack too.
      unpacks.clear();
      at = 0;
      std::size_t run = 0;
      for_each_run(p, k, [&](int start, int len) {
        const step_id u = b.copy(blocks(in_stage, at, len), blocks(rotated, start, len), {got, packs[run++]});
        wrote(start, len, u);
        unpacks.push_back(u);
        at += len;
      });
    }
    for (int i = 0; i < p; ++i)
      b.copy(blocks(rotated, i), blocks(output, (r - i + p) % p), {written[static_cast<std::size_t>(i)]});
  }
};

}  // namespace mimatrix::algorithm
