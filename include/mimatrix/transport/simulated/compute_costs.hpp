// What a simulated rank's processor and software cost, besides the network.
#pragma once

namespace mimatrix::transport::simulated {

/// The compute side of the α-β-γ model, per rank.
struct compute_costs {
  /// γ⁻¹: recv_reduce, reduce and reduce_slots combine this many bytes a second.
  double reduce_bytes_per_second = 20e9;
  /// Local copies; 0: free (they overlap, or are pointer swaps).
  double copy_bytes_per_second = 0;
  /// Added to every message's delivery: the software part of α (posting, completion).
  double message_overhead = 0;
  /// LogGP's g: one rank starts its messages at least this far apart.
  double message_gap = 0;
};

}  // namespace mimatrix::transport::simulated
