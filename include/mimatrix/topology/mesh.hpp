// topology::mesh: a full mesh, every pair of ranks directly connected (one switch, or
// NICs that reach every peer at full rate); the topology GDRAA's all-to-all writes need.
#pragma once

#include <string>
#include <string_view>

#include "mimatrix/core/error.hpp"
#include "mimatrix/topology/layout.hpp"

namespace mimatrix::topology {

/// @par Thread Safety
/// Stateless: safe to share between threads.
class mesh {
 public:
  static constexpr std::string_view name = "mesh";

  /// Throws invalid_argument unless `size` is at least one rank.
  void check(int size) const {
    if (size < 1)
      throw error(errc::invalid_argument, "topology::mesh: a mesh needs at least one rank, got " + std::to_string(size));
  }

  /// Every two different ranks of the group are neighbours.
  static constexpr bool connected(int a, int b, int size) { return a != b && a >= 0 && b >= 0 && a < size && b < size; }

  /// Each rank has size-1 neighbours: every other rank.
  static constexpr int degree(int size) { return size - 1; }
};

}  // namespace mimatrix::topology
