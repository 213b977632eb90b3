// What a simulated rank's processor and software cost, besides the network.
#pragma once

#include <cmath>
#include <string>

#include "mimatrix/core/error.hpp"

namespace mimatrix::transport::simulated {

/// The compute side of the α-β-γ model, per rank.
struct compute_costs {
  /// γ⁻¹: recv_reduce, reduce and reduce_slots combine this many bytes a second; 0: free
  /// (the network alone).
  double reduce_bytes_per_second = 20e9;
  /// Local copies; 0: free (they overlap, or are pointer swaps).
  double copy_bytes_per_second = 0;
  /// Added to every message's delivery: the software part of α (posting, completion).
  double message_overhead = 0;
  /// LogGP's g: one rank starts its messages at least this far apart.
  double message_gap = 0;
};

/// `c`, or errc::invalid_argument naming the field that no processor could have.
inline const compute_costs& checked(const compute_costs& c) {
  const auto fail = [](const std::string& what) {
    throw error(errc::invalid_argument, "transport::simulated::compute_costs: " + what);
  };
  if (!(c.reduce_bytes_per_second >= 0))
    fail("reduce_bytes_per_second must not be negative (0: reductions are free), got " +
         std::to_string(c.reduce_bytes_per_second));
  if (!(c.copy_bytes_per_second >= 0))
    fail("copy_bytes_per_second must not be negative (0: copies are free), got " +
         std::to_string(c.copy_bytes_per_second));
  // An infinite one would read as a call that cannot finish, blaming the schedules.
  if (!(c.message_overhead >= 0) || !(c.message_gap >= 0) || !std::isfinite(c.message_overhead) ||
      !std::isfinite(c.message_gap))
    fail("message_overhead and message_gap must be finite and not negative, got " +
         std::to_string(c.message_overhead) + " and " + std::to_string(c.message_gap));
  return c;
}

}  // namespace mimatrix::transport::simulated
