// model::cost: the predicted time of every algorithm's collectives under the α-β-γ
// model (Thakur, Rabenseifner & Gropp 2005), with the network's numbers as inputs.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <optional>
#include <string_view>

#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::model {

/// One link as the α-β-γ model sees it (Hockney's α-β plus a reduction rate): sending a
/// message of n bytes takes α + nβ, reducing n bytes into a buffer takes nγ.
struct link_model {
  double alpha = 0;  // seconds per message: start-up latency
  double beta = 0;   // seconds per byte: 1 / bandwidth
  double gamma = 0;  // seconds per byte reduced: 1 / reduction rate

  /// From the numbers people quote: latency in seconds, rates in bytes per second.
  static constexpr link_model from_rates(double latency, double bytes_per_second, double reduced_bytes_per_second) {
    return {latency, 1.0 / bytes_per_second, 1.0 / reduced_bytes_per_second};
  }
};

/// Everything the model knows about the machine. The defaults are a typical 2018-era
/// cluster (the one the seed papers measured on): 100 Gb/s RDMA between nodes, a faster
/// fabric inside a node, one NIC per accelerator.
///
/// @par Thread Safety
/// A plain value.
struct network {
  /// The links between ranks; between nodes when a node holds several ranks.
  link_model link = link_model::from_rates(5e-6, 10e9, 20e9);
  /// The links inside a node (NVLink, PCIe, shared memory): hierarchical's local phases.
  link_model local = link_model::from_rates(1e-6, 50e9, 20e9);
  /// Ranks that share a node: hierarchical's local group. 1 means a flat machine.
  int ranks_per_node = 1;
  /// Ranks of a node that share one NIC: their inter-node traffic shares its bandwidth
  /// (EFLOPS' NIC congestion). Applies to hierarchical's inter-node phase.
  int ranks_per_nic = 1;
  /// LogGP's gap g: the extra time each further message costs when one rank has many in
  /// flight to or from different peers at once (posting, completion and flag handling).
  /// Only direct algorithms (GDRAA) send p-1 messages in one step.
  double message_gap = 1e-6;
  /// Incast: the fraction of link bandwidth lost for each sender beyond the first that
  /// writes into one NIC at once (switch buffer overflow, PFC pauses, retransmission).
  /// 0 models a lossless, perfectly fair switch.
  double incast_loss = 0;
  /// How many flows share the busiest link at each step of plain halving-doubling on a
  /// topology it does not know, e.g. BiGraph with the identity rank mapping (EFLOPS
  /// §4: partners inside one switch group share its bipartite uplinks). 1 is no sharing;
  /// HDRM's mapping makes it 1 by construction.
  double shared_link_flows = 1;
  /// Chunk size of pipelined chains (ring broadcast): algorithm::default_chunk_bytes, or
  /// what the transport suggests (algorithm::basic_automatic::complete_policy).
  std::size_t pipeline_chunk_bytes = 256 * 1024;
};

/// The "n" of Thakur et al. for a call: the whole vector a rank holds at its largest
/// (allreduce, reduce and broadcast: the message; reduce-scatter, scatter and alltoall:
/// the input, p blocks; allgather and gather: the output, p blocks). It is also
/// nccl-tests' "size" column.
inline double message_bytes(const schedule::descriptor& d) { return static_cast<double>(d.largest_bytes()); }

namespace detail {

/// p = 2^lg + extra: power-of-two algorithms fold the extra ranks in first (MPICH).
struct folding {
  int p2 = 1;     // the largest power of two <= p
  int lg = 0;     // lg p2
  int extra = 0;  // p - p2

  explicit constexpr folding(int p) {
    while (p2 * 2 <= p) {
      p2 *= 2;
      ++lg;
    }
    extra = p - p2;
  }
};

constexpr double ceil_lg(int p) {
  int lg = 0;
  while ((1 << lg) < p) ++lg;
  return lg;
}

constexpr double fraction(int p) { return static_cast<double>(p - 1) / p; }  // (p-1)/p

}  // namespace detail

// Every function below: `p` ranks, `n` bytes as message_bytes() defines them, the
// predicted seconds of one call. A group of one only copies: 0.

/// Ring (Thakur et al. 2005 §4.1 for allreduce = reduce-scatter + allgather; Patarasuk
/// & Yuan 2009 for its bandwidth optimality):
///   allreduce       2(p-1)α + 2(p-1)/p·nβ + (p-1)/p·nγ
///   reduce_scatter   (p-1)α +  (p-1)/p·nβ + (p-1)/p·nγ
///   allgather        (p-1)α +  (p-1)/p·nβ
///   broadcast       (p-2+k)(α + (n/k)β), a chain pipelined in k chunks of at most
///                   pipeline_chunk_bytes (Thakur et al. §3.2 on pipelined broadcast)
/// The textbook form: the implementation's chunking overlaps γ with β, which this
/// ignores, so large-message ring times are upper bounds.
constexpr double ring(const network& net, schedule::collective kind, int p, double n) {
  if (p <= 1) return 0;
  const link_model& l = net.link;
  const double f = detail::fraction(p);
  switch (kind) {
    case schedule::collective::allreduce: return 2 * (p - 1) * l.alpha + 2 * f * n * l.beta + f * n * l.gamma;
    case schedule::collective::reduce_scatter: return (p - 1) * l.alpha + f * n * (l.beta + l.gamma);
    case schedule::collective::allgather: return (p - 1) * l.alpha + f * n * l.beta;
    case schedule::collective::broadcast: {
      const double chunk = static_cast<double>(net.pipeline_chunk_bytes);
      double k = n > chunk ? static_cast<double>(static_cast<long long>((n + chunk - 1) / chunk)) : 1;
      return (p - 2 + k) * (l.alpha + n / k * l.beta);
    }
    default: break;  // the calls added later: predict() leaves them to their algorithms
  }
  return 0;
}

/// Recursive doubling (Thakur et al. 2005 §4.4; allgather §3.1; broadcast: binomial
/// tree §3.2). With p2 = 2^⌊lg p⌋, the p - p2 extra ranks fold in before and get the
/// result after (MPICH), which adds two steps when p is not a power of two:
///   allreduce       lg p2·(α + nβ + nγ)        + [2α + 2nβ + nγ]
///   reduce_scatter  lg p2·α + (p2-1)/p2·n(β+γ) + [α + nβ + nγ + α + n/p·β]
///                   (recursive halving, §4.2, for commutative operations)
///   allgather       lg p2·α + (p2-1)/p2·nβ     + [α + n/p·β + α + nβ]
///   broadcast       ⌈lg p⌉(α + nβ)
/// Latency-optimal: lg p start-ups, but allreduce sends the whole vector every step.
constexpr double recursive_doubling(const network& net, schedule::collective kind, int p, double n) {
  if (p <= 1) return 0;
  const link_model& l = net.link;
  const detail::folding fold(p);
  const bool folded = fold.extra > 0;
  const double f2 = detail::fraction(fold.p2);
  switch (kind) {
    case schedule::collective::allreduce:
      return fold.lg * (l.alpha + n * l.beta + n * l.gamma) +
             (folded ? 2 * l.alpha + 2 * n * l.beta + n * l.gamma : 0);
    case schedule::collective::reduce_scatter:
      return fold.lg * l.alpha + f2 * n * (l.beta + l.gamma) +
             (folded ? 2 * l.alpha + n * (l.beta + l.gamma) + n / p * l.beta : 0);
    case schedule::collective::allgather:
      return fold.lg * l.alpha + f2 * n * l.beta + (folded ? 2 * l.alpha + n / p * l.beta + n * l.beta : 0);
    case schedule::collective::broadcast: return detail::ceil_lg(p) * (l.alpha + n * l.beta);
    default: break;  // the calls added later: predict() leaves them to their algorithms
  }
  return 0;
}

/// Halving-doubling (Rabenseifner 2004; Thakur et al. 2005 §4.3): recursive-halving
/// reduce-scatter then recursive-doubling allgather; broadcast is scatter + allgather
/// (van de Geijn, Thakur et al. §3.2). Extra ranks fold in as for recursive doubling.
///   allreduce       2 lg p2·α + 2(p2-1)/p2·nβ + (p2-1)/p2·nγ  + [2α + 2nβ + nγ]
///   reduce_scatter    lg p2·α +  (p2-1)/p2·n(β+γ)            + [α + nβ + nγ + α + n/p·β]
///   allgather         lg p2·α +  (p2-1)/p2·nβ                + [α + n/p·β + α + nβ]
///   broadcast       2⌈lg p⌉α + 2(p-1)/p·nβ
/// `shared_links` multiplies every β: the flows that share the busiest link at each
/// step when the rank mapping ignores the topology (EFLOPS, HPCA 2020, §4).
constexpr double halving_doubling(const network& net, schedule::collective kind, int p, double n,
                                  double shared_links = 1) {
  if (p <= 1) return 0;
  const link_model& l = net.link;
  const double beta = l.beta * shared_links;
  const detail::folding fold(p);
  const bool folded = fold.extra > 0;
  const double f2 = detail::fraction(fold.p2);
  switch (kind) {
    case schedule::collective::allreduce:
      return 2 * fold.lg * l.alpha + 2 * f2 * n * beta + f2 * n * l.gamma +
             (folded ? 2 * l.alpha + 2 * n * beta + n * l.gamma : 0);
    case schedule::collective::reduce_scatter:
      return fold.lg * l.alpha + f2 * n * (beta + l.gamma) +
             (folded ? 2 * l.alpha + n * (beta + l.gamma) + n / p * beta : 0);
    case schedule::collective::allgather:
      return fold.lg * l.alpha + f2 * n * beta + (folded ? 2 * l.alpha + n / p * beta + n * beta : 0);
    case schedule::collective::broadcast:
      return 2 * detail::ceil_lg(p) * l.alpha + 2 * detail::fraction(p) * n * beta;
    default: break;  // the calls added later: predict() leaves them to their algorithms
  }
  return 0;
}

/// Plain halving-doubling on a topology where its partners share links: β times
/// network::shared_link_flows.
constexpr double halving_doubling_shared(const network& net, schedule::collective kind, int p, double n) {
  return halving_doubling(net, kind, p, n, net.shared_link_flows);
}

/// HDRM (EFLOPS, HPCA 2020): halving-doubling with BiGraph's rank mapping, which puts at
/// most one flow on every link at every step of a power-of-two group, so its time is then
/// halving_doubling's with no sharing whatever network::shared_link_flows says. Other
/// sizes run halving-doubling in rank order (algorithm::hdrm::order), shared as it is.
constexpr double hdrm(const network& net, schedule::collective kind, int p, double n) {
  return halving_doubling(net, kind, p, n, std::has_single_bit(unsigned(p)) ? 1 : net.shared_link_flows);
}

/// GDRAA (MiMatrix, arXiv 1802.02326): one-sided writes to every peer at once, one
/// synchronization a phase. A phase in which every rank writes one shard of n/p bytes to
/// each of the p-1 others costs α + (p-2)g + (p-1)/p·nβ·e: one start-up, the other p-2
/// messages at the gap g, and the bandwidth of one NIC receiving from p-1 senders,
/// slowed by incast (e = 1 + incast_loss·(p-2)).
///   allreduce       2[α + (p-2)g] + 2(p-1)/p·nβ·e + (p-1)/p·nγ    (two syncs)
///   reduce_scatter   [α + (p-2)g] +  (p-1)/p·nβ·e + (p-1)/p·nγ    (phase A)
///   allgather        [α + (p-2)g] +  (p-1)/p·nβ·e                 (phase B)
///   broadcast         α + (p-2)g  +  (p-1)·nβ                     (the root writes its
///                   whole input to every rank: its one link carries p-1 copies)
/// With g = 0 and no incast loss this is the paper's 2α + 2(p-1)/p·nβ + (p-1)/p·nγ.
constexpr double gdraa(const network& net, schedule::collective kind, int p, double n) {
  if (p <= 1) return 0;
  const link_model& l = net.link;
  const double phase_start = l.alpha + (p - 2) * net.message_gap;
  const double moved = detail::fraction(p) * n * l.beta * (1 + net.incast_loss * (p - 2));
  const double reduced = detail::fraction(p) * n * l.gamma;
  switch (kind) {
    case schedule::collective::allreduce: return 2 * phase_start + 2 * moved + reduced;
    case schedule::collective::reduce_scatter: return phase_start + moved + reduced;
    case schedule::collective::allgather: return phase_start + moved;
    case schedule::collective::broadcast: return phase_start + (p - 1) * n * l.beta;
    default: break;  // the calls added later: predict() leaves them to their algorithms
  }
  return 0;
}

/// Hierarchical (two-level; Thakur et al. §5 discuss SMP-aware variants, Horovod and
/// NCCL use this shape): m = ranks_per_node, q = p/m nodes. Local phases are rings on
/// network::local; the inter-node phase is `global` over network::link, one per local
/// rank on its own NIC (rails in parallel), with β times ranks_per_nic when NICs are
/// shared:
///   allreduce       ring_rs(local, m, n) + global_allreduce(q, n/m)  + ring_ag(local, m, n)
///   reduce_scatter  ring_rs(local, m, n) + global_reduce_scatter(q, n/m)
///   allgather       global_allgather(q, n/m) + ring_ag(local, m, n)
///   broadcast       global_broadcast(q, n) + ring_broadcast(local, m, n)
/// Empty when m does not divide p or `global` has no model.
constexpr std::optional<double> hierarchical(const network& net, schedule::collective kind, int p, double n,
                                             std::string_view global = "ring");

/// Every algorithm the model knows, by its `name`.
inline constexpr std::array<std::string_view, 6> known_algorithms{
    "ring", "recursive_doubling", "halving_doubling", "hdrm", "gdraa", "hierarchical"};

/// The predicted time of the algorithm called `algorithm`, or empty when the model does
/// not know it. "halving_doubling" is charged network::shared_link_flows.
constexpr std::optional<double> predict(std::string_view algorithm, const network& net, schedule::collective kind,
                                        int p, double n) {
  // The calls added later are priced by their algorithms (a predict member, e.g. binomial's).
  if (kind != schedule::collective::allreduce && kind != schedule::collective::reduce_scatter &&
      kind != schedule::collective::allgather && kind != schedule::collective::broadcast)
    return std::nullopt;
  if (algorithm == "ring") return ring(net, kind, p, n);
  if (algorithm == "recursive_doubling") return recursive_doubling(net, kind, p, n);
  if (algorithm == "halving_doubling") return halving_doubling_shared(net, kind, p, n);
  if (algorithm == "hdrm") return hdrm(net, kind, p, n);
  if (algorithm == "gdraa") return gdraa(net, kind, p, n);
  if (algorithm == "hierarchical") return hierarchical(net, kind, p, n);
  return std::nullopt;
}

inline std::optional<double> predict(std::string_view algorithm, const network& net,
                                     const schedule::descriptor& d) {
  return predict(algorithm, net, d.kind, d.size, message_bytes(d));
}

constexpr std::optional<double> hierarchical(const network& net, schedule::collective kind, int p, double n,
                                             std::string_view global) {
  const int m = net.ranks_per_node < 1 ? 1 : net.ranks_per_node;
  if (p <= 1) return 0.0;
  if (p % m != 0 || global == "hierarchical") return std::nullopt;
  const int q = p / m;
  network inter = net;
  inter.link.beta *= net.ranks_per_nic < 1 ? 1 : net.ranks_per_nic;
  network intra = net;
  intra.link = net.local;
  using schedule::collective;
  const auto outer = [&](collective k, double bytes) { return predict(global, inter, k, q, bytes); };
  std::optional<double> across;
  double within = 0;
  switch (kind) {
    case collective::allreduce:
      across = outer(collective::allreduce, n / m);
      within = ring(intra, collective::reduce_scatter, m, n) + ring(intra, collective::allgather, m, n);
      break;
    case collective::reduce_scatter:
      across = outer(collective::reduce_scatter, n / m);
      within = ring(intra, collective::reduce_scatter, m, n);
      break;
    case collective::allgather:
      across = outer(collective::allgather, n / m);
      within = ring(intra, collective::allgather, m, n);
      break;
    case collective::broadcast:
      across = outer(collective::broadcast, n);
      within = ring(intra, collective::broadcast, m, n);
      break;
    default: break;  // the calls added later: predict() leaves them to their algorithms
  }
  if (!across) return std::nullopt;
  return *across + within;
}

}  // namespace mimatrix::model
