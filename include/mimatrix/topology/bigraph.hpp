// topology::bigraph: EFLOPS' two-layer network (HPCA 2020). Switches form two groups,
// every switch of one group is wired to every switch of the other, none within a group;
// each node (one NIC, one rank) hangs off one switch.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/topology/layout.hpp"

namespace mimatrix::topology {

/// N switches (N even; switches 0..N/2-1 are group 0, N/2..N-1 group 1) with M nodes
/// each. Rank r is node r: switch r / M, slot r % M on it. A group may leave nodes
/// empty at the end (fewer ranks than N·M); algorithms fold the extra ranks in.
///
///   group 0:  switch 0 ─┬─ ... ─ switch N/2-1      each with nodes s·M .. s·M+M-1
///                       ╳  complete bipartite (N/2)² links, none inside a group
///   group 1:  switch N/2 ─ ... ─ switch N-1
///
/// Default-constructed, the shape follows the world size (`for_size`).
///
/// @par Thread Safety
/// Immutable after construction: safe to share between threads.
class bigraph {
 public:
  static constexpr std::string_view name = "bigraph";

  /// A node or a switch.
  struct endpoint {
    bool is_switch = false;
    int index = 0;
    friend bool operator==(const endpoint&, const endpoint&) = default;
  };
  /// One directed hop; `bipartite()` for the switch-to-switch links between groups.
  struct link {
    endpoint from;
    endpoint to;
    bool bipartite() const { return from.is_switch && to.is_switch; }
    friend bool operator==(const link&, const link&) = default;
  };

  /// The shape is chosen from the world size when the topology is checked.
  bigraph() = default;
  /// `switches` N (even, at least 2) and `nodes_per_switch` M (at least 1).
  bigraph(int switches, int nodes_per_switch) : switches_(switches), nodes_(nodes_per_switch) {
    if (switches < 2 || switches % 2 != 0)
      throw error(errc::invalid_argument, "topology::bigraph: the switches split into two equal groups, so their number "
                                          "must be even and at least 2, got " + std::to_string(switches));
    if (nodes_per_switch < 1)
      throw error(errc::invalid_argument, "topology::bigraph: every switch needs at least one node, got " +
                                              std::to_string(nodes_per_switch));
  }

  /// The shape for `size` ranks: P = size rounded up to a power of two, N the smallest
  /// power of two with M = P/N <= N/2 (so HDRM's links stay distinct), at least 2.
  /// 8 ranks: 4 switches of 2; 64: 16 of 4; 1024: 64 of 16.
  static bigraph for_size(int size) {
    if (size < 1) throw error(errc::invalid_argument, "topology::bigraph: a group needs at least one rank, got " + std::to_string(size));
    const int p = int(std::bit_ceil(unsigned(size)));
    int n = 2;
    while (p / n > n / 2) n *= 2;
    return bigraph(n, p / n > 0 ? p / n : 1);
  }

  /// True when the shape follows the world size.
  bool automatic() const { return switches_ == 0; }
  /// This shape, or `for_size(size)` when automatic.
  bigraph resolved(int size) const { return automatic() ? for_size(size) : *this; }

  /// The shape for `size` ranks (topology::digest_of).
  std::uint64_t digest(int size) const {
    const bigraph b = resolved(size);
    return mimatrix::digest{}.mix(name).mix(std::uint64_t(b.switches_)).mix(std::uint64_t(b.nodes_)).value();
  }

  int switches() const { return switches_; }
  int nodes_per_switch() const { return nodes_; }
  int capacity() const { return switches_ * nodes_; }
  /// HDRM's mapping gives every pair of a step its own bipartite link when M <= N/2.
  bool distinct_links() const { return nodes_ <= switches_ / 2; }

  /// Throws invalid_argument when `size` ranks do not fit.
  void check(int size) const {
    if (size < 1) throw error(errc::invalid_argument, "topology::bigraph: a group needs at least one rank, got " + std::to_string(size));
    if (!automatic() && size > capacity())
      throw error(errc::invalid_argument, "topology::bigraph: " + std::to_string(size) + " ranks do not fit on " +
                                              std::to_string(switches_) + " switches of " + std::to_string(nodes_) +
                                              " nodes (" + std::to_string(capacity()) + " nodes)");
  }

  /// The switch rank `rank` hangs off.
  int switch_of(int rank) const { return rank / shaped().nodes_; }
  /// Its slot on that switch (0..M-1).
  int slot_of(int rank) const { return rank % shaped().nodes_; }
  /// Its node: switch·M + slot (ranks are nodes in order).
  int node_of(int rank) const { return rank; }
  /// Its group, 0 or 1: the side of the bipartite graph its switch is on.
  int group_of(int rank) const { return group_of_switch(switch_of(rank)); }
  int group_of_switch(int s) const { return s < shaped().switches_ / 2 ? 0 : 1; }

  /// The physical hops from rank a to rank b (empty when a == b): through their shared
  /// switch; across groups over the one bipartite link between their switches; within a
  /// group through switch (sa + sb) % (N/2) of the other group (a fixed choice, like
  /// one ECMP hash).
  std::vector<link> path(int a, int b) const {
    if (a == b) return {};
    const int sa = switch_of(a), sb = switch_of(b), half = shaped().switches_ / 2;
    const endpoint na{false, a}, nb{false, b}, wa{true, sa}, wb{true, sb};
    if (sa == sb) return {{na, wa}, {wa, nb}};
    if (group_of_switch(sa) != group_of_switch(sb)) return {{na, wa}, {wa, wb}, {wb, nb}};
    const endpoint via{true, (sa + sb) % half + (group_of_switch(sa) == 0 ? half : 0)};
    return {{na, wa}, {wa, via}, {via, wb}, {wb, nb}};
  }

 private:
  const bigraph& shaped() const {
    if (automatic())
      throw error(errc::invalid_argument,
                  "topology::bigraph: this topology takes its shape from the world size; call resolved(size) first");
    return *this;
  }

  int switches_ = 0;
  int nodes_ = 0;
};

}  // namespace mimatrix::topology
