// transport::simulated's cluster models: servers (accelerators, PCIe, NICs) on one ideal
// switch, a two-level fat-tree with ECMP, or EFLOPS' BiGraph, as links of a `network`.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/topology/bigraph.hpp"
#include "mimatrix/transport/simulated/network.hpp"

namespace mimatrix::transport::simulated {

/// The numbers of a cluster. Rates are in Gb/s (bits), as vendors quote them.
struct cluster_config {
  /// Where a server's traffic to other servers leaves it. EFLOPS' server gives every
  /// accelerator its own NIC under its own PCIe switch; a shared NIC hangs off the PCIe
  /// root, so the server's accelerators share its one port (EFLOPS' NIC congestion).
  enum class nic { per_accelerator, shared };

  int ranks = 1;                    // accelerators in all; rank r is on server r / per_server
  int per_server = 1;               // accelerators a server (the last server may have fewer)
  nic nics = nic::per_accelerator;
  double link_gbps = 100;           // NIC and switch ports (100 GbE, as in EFLOPS)
  double latency_us = 1;            // a hop over a network link (cable and switch)
  double pcie_gbps = 128;           // a GPU's PCIe link, and a shared NIC's link to the root
                                    // (x16 gen3: 16 lanes x 8 GT/s); 0: no PCIe, a rank is its NIC
  double intra_gbps = 0;            // 0: GPUs of a server talk over PCIe; > 0: over a direct
                                    // (NVLink-like) fabric, this rate a GPU and direction
  double server_latency_us = 0.5;   // a hop inside a server (PCIe, the intra fabric)
  // Fat-tree only.
  double oversubscription = 1;      // a leaf's downlink capacity / its uplink capacity
  int servers_per_leaf = 0;         // 0: as many as fill 32 NIC ports (a 64-port leaf, half down)
  int spines = 0;                   // 0: a leaf's NIC ports / oversubscription, so an uplink
                                    // runs at link_gbps
  std::uint64_t ecmp_seed = 0;      // salt of the ECMP hash: another seed, another set of collisions
  /// Each NIC's own port rate (one a NIC: per accelerator, or per server when shared),
  /// for clusters of mixed hosts; empty: every port at link_gbps. Not contention-free.
  std::vector<double> nic_gbps{};
};

/// What a link is. `link_info::from` and `to` index what the role names: a rank, a
/// server (its PCIe switch or root, its intra fabric), a NIC, a switch (leaf, BiGraph
/// switch, 0 for the ideal switch), a leaf or a spine.
enum class link_role : std::uint8_t {
  gpu_up,         // rank -> server PCIe
  gpu_down,       // server PCIe -> rank
  intra_up,       // rank -> server intra fabric
  intra_down,     // server intra fabric -> rank
  nic_pcie_up,    // shared NIC only: server PCIe root -> NIC
  nic_pcie_down,  // NIC -> server PCIe root
  nic_up,         // NIC -> switch
  nic_down,       // switch -> NIC
  leaf_up,        // leaf -> spine
  spine_down,     // spine -> leaf
  bipartite,      // BiGraph switch -> switch of the other group
};

struct link_info {
  link_role role{};
  int from = 0;
  int to = 0;
  friend bool operator==(const link_info&, const link_info&) = default;
};

class cluster;
inline cluster make_contention_free(const cluster_config& config);
inline cluster make_fat_tree(const cluster_config& config);
inline cluster make_bigraph(const cluster_config& config, topology::bigraph shape = {});

/// A network and, for any two ranks, the links a message between them crosses.
///
/// Inside a server, traffic between its accelerators goes over PCIe (GPU -> PCIe switch
/// or root -> GPU) or the intra fabric, never a NIC. Traffic to another server crosses
/// the GPU's PCIe link, (with a shared NIC) the root's link to the NIC, the NIC's port,
/// the switches, and the same in reverse. Every link is one direction. Link ids are laid
/// out in blocks by formula, so a path costs a few integer operations and no table.
///
/// @par Thread Safety
/// `path`, `info` and `describe` are const and may run concurrently; `net` is a plain
/// value (one thread at a time).
class cluster {
 public:
  enum class kind { contention_free, fat_tree, bigraph };

  /// The links; the simulator starts flows on it. Adding links does not change paths.
  network net;

  kind model() const { return kind_; }
  const cluster_config& config() const { return config_; }
  int ranks() const { return config_.ranks; }
  int servers() const { return servers_; }
  int server_of(int rank) const { return rank / config_.per_server; }
  /// NICs in all, and a rank's NIC: its own, or its server's shared one.
  int nics() const { return nics_; }
  int nic_of(int rank) const { return shared_ ? server_of(rank) : rank; }
  /// The switch a NIC is on: its leaf, its BiGraph switch, or the ideal switch 0.
  int switch_of_nic(int nic) const {
    return kind_ == kind::fat_tree ? nic / nics_per_leaf_ : kind_ == kind::bigraph ? nic / nodes_per_switch_ : 0;
  }
  /// Fat-tree: leaves and spines (no spines with one leaf).
  int leaves() const { return leaves_; }
  int spines() const { return spines_; }
  /// Fat-tree with spines: the spine ECMP picks for a message from rank a to rank b on
  /// another leaf, a hash of the pair as a switch hashes a connection's 5-tuple.
  int spine_for(int a, int b) const {
    std::uint64_t x = (std::uint64_t(std::uint32_t(a)) << 32 | std::uint32_t(b)) +
                      (config_.ecmp_seed + 1) * 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;  // splitmix64's finalizer
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return int((x ^ (x >> 31)) % std::uint64_t(spines_));
  }
  /// BiGraph: the shape, resolved for nics() nodes.
  const topology::bigraph& shape() const { return shape_; }

  /// The most links a path has (GPU, root, NIC and two bipartite links, and back).
  static constexpr std::size_t max_path = 8;

  /// The links from rank a to rank b (both in 0..ranks()-1, unchecked: this runs for
  /// every message), in order, into `out` (cleared first; empty when a == b). Allocates
  /// nothing once `out` has room for max_path links.
  void path(int a, int b, std::vector<link_id>& out) const {
    out.clear();
    if (a == b) return;
    if (kind_ == kind::contention_free) {
      out.push_back(link_id(nic_up_ + a));
      out.push_back(link_id(nic_down_ + b));
      return;
    }
    const int sa = server_of(a), sb = server_of(b);
    if (sa == sb) {
      const link_id up = intra_ ? intra_up_ : gpu_up_, down = intra_ ? intra_down_ : gpu_down_;
      out.push_back(link_id(up + a));
      out.push_back(link_id(down + b));
      return;
    }
    if (pcie_) out.push_back(link_id(gpu_up_ + a));
    if (pcie_ && shared_) out.push_back(link_id(nic_pcie_up_ + sa));
    const int na = nic_of(a), nb = nic_of(b);
    out.push_back(link_id(nic_up_ + na));
    const int wa = switch_of_nic(na), wb = switch_of_nic(nb);
    if (wa != wb) {
      if (kind_ == kind::fat_tree) {
        const int s = spine_for(a, b);
        out.push_back(link_id(leaf_up_ + wa * spines_ + s));
        out.push_back(link_id(spine_down_ + s * leaves_ + wb));
      } else {
        // As topology::bigraph::path: across groups one bipartite link; within a group
        // through switch (wa + wb) % (N/2) of the other group.
        const int half = shape_.switches() / 2;
        if ((wa < half) != (wb < half)) {
          out.push_back(bipartite_link(wa, wb));
        } else {
          const int via = (wa + wb) % half + (wa < half ? half : 0);
          out.push_back(bipartite_link(wa, via));
          out.push_back(bipartite_link(via, wb));
        }
      }
    }
    out.push_back(link_id(nic_down_ + nb));
    if (pcie_ && shared_) out.push_back(link_id(nic_pcie_down_ + sb));
    if (pcie_) out.push_back(link_id(gpu_down_ + b));
  }

  /// BiGraph only: the directed link from switch u to switch w of the other group.
  link_id bipartite_link(int u, int w) const {
    const int half = shape_.switches() / 2;
    return link_id(bipartite_ + u * half + w % half);
  }

  /// What link `id` is and what it joins.
  link_info info(link_id id) const {
    for (const block& b : blocks_) {
      if (id < b.first || id >= b.first + b.count) continue;
      const int k = int(id - b.first), g = config_.per_server;
      switch (b.role) {
        case link_role::gpu_up:
        case link_role::intra_up: return {b.role, k, k / g};
        case link_role::gpu_down:
        case link_role::intra_down: return {b.role, k / g, k};
        case link_role::nic_pcie_up:
        case link_role::nic_pcie_down: return {b.role, k, k};
        case link_role::nic_up: return {b.role, k, switch_of_nic(k)};
        case link_role::nic_down: return {b.role, switch_of_nic(k), k};
        case link_role::leaf_up: return {b.role, k / spines_, k % spines_};
        case link_role::spine_down: return {b.role, k / leaves_, k % leaves_};
        case link_role::bipartite: {
          const int half = shape_.switches() / 2, u = k / half;
          return {b.role, u, k % half + (u < half ? half : 0)};
        }
      }
    }
    throw error(errc::invalid_argument, "transport::simulated::cluster: no link " + std::to_string(id) + " among " +
                                            std::to_string(net.links()));
  }

  /// One line about link `id`: "leaf 3 -> spine 5".
  std::string describe(link_id id) const {
    const link_info i = info(id);
    const char* names[][2] = {{"rank", "server pcie"},  {"server pcie", "rank"}, {"rank", "server fabric"},
                              {"server fabric", "rank"}, {"server pcie", "nic"},  {"nic", "server pcie"},
                              {"nic", "switch"},         {"switch", "nic"},       {"leaf", "spine"},
                              {"spine", "leaf"},         {"switch", "switch"}};
    const auto& n = names[int(i.role)];
    return std::string(n[0]) + " " + std::to_string(i.from) + " -> " + n[1] + " " + std::to_string(i.to);
  }

  /// One line about the cluster: "fat-tree: 512 leaves x 4 servers x 8 GPUs (a NIC
  /// each), 32 spines, 100 Gb/s ports, 1:1, ...".
  std::string describe() const {
    std::ostringstream s;
    const auto& c = config_;
    const auto gpus = [&] {
      std::ostringstream g;
      g << c.per_server << (c.per_server == 1 ? " GPU" : " GPUs")
        << (kind_ == kind::contention_free ? "" : shared_ ? " (one shared NIC)" : " (a NIC each)");
      return g.str();
    };
    const auto server = [&] {
      std::ostringstream v;
      if (pcie_) v << ", PCIe " << c.pcie_gbps << " Gb/s";
      if (intra_) v << ", intra-server " << c.intra_gbps << " Gb/s";
      v << ", " << c.latency_us << " us a network hop";
      if (pcie_ || intra_) v << ", " << c.server_latency_us << " us a server hop";
      return v.str();
    };
    switch (kind_) {
      case kind::contention_free:
        s << "contention-free: " << c.ranks << " ranks, each a private " << c.link_gbps
          << " Gb/s up and down link to one non-blocking switch, " << c.latency_us << " us a hop";
        return s.str();
      case kind::fat_tree:
        s << "fat-tree: " << leaves_ << (leaves_ == 1 ? " leaf x " : " leaves x ") << nics_per_leaf_ / nics_per_server()
          << " servers x " << gpus() << ", " << spines_ << " spines, " << c.link_gbps << " Gb/s ports, "
          << c.oversubscription << ":1";
        if (spines_ > 0) s << " (uplinks " << uplink_gbps_ << " Gb/s)";
        break;
      case kind::bigraph:
        s << "bigraph: 2 x " << shape_.switches() / 2 << " switches x " << shape_.nodes_per_switch() << " nodes, "
          << servers_ << " servers x " << gpus() << ", " << c.link_gbps << " Gb/s ports";
        break;
    }
    s << ", " << c.ranks << " ranks" << server();
    return s.str();
  }

  friend cluster make_contention_free(const cluster_config& config);
  friend cluster make_fat_tree(const cluster_config& config);
  friend cluster make_bigraph(const cluster_config& config, topology::bigraph shape);

 private:
  struct block {
    link_id first;
    link_id count;
    link_role role;
  };

  cluster(const cluster_config& c, kind k) : kind_(k), config_(c) {
    const auto fail = [](const std::string& what) {
      throw error(errc::invalid_argument, "transport::simulated::cluster: " + what);
    };
    if (c.ranks < 1) fail("a cluster needs at least one rank, got " + std::to_string(c.ranks));
    if (c.per_server < 1) fail("a server needs at least one accelerator, got " + std::to_string(c.per_server));
    if (!(c.link_gbps > 0)) fail("link_gbps must be positive");
    if (!(c.pcie_gbps >= 0) || !(c.intra_gbps >= 0)) fail("pcie_gbps and intra_gbps must not be negative");
    if (!(c.latency_us >= 0) || !(c.server_latency_us >= 0)) fail("latencies must not be negative");
    if (!(c.oversubscription > 0)) fail("oversubscription must be positive");
    if (c.servers_per_leaf < 0 || c.spines < 0) fail("servers_per_leaf and spines must not be negative");
    servers_ = (c.ranks + c.per_server - 1) / c.per_server;
    if (k == kind::contention_free) {
      if (!c.nic_gbps.empty()) fail("nic_gbps is for fat-tree and BiGraph clusters: a contention-free one's ports all run at link_gbps");
      nics_ = c.ranks;
      nic_up_ = add(link_role::nic_up, c.ranks, port());
      nic_down_ = add(link_role::nic_down, c.ranks, port());
      return;
    }
    pcie_ = c.pcie_gbps > 0;
    intra_ = c.intra_gbps > 0 && c.per_server > 1;
    shared_ = c.nics == cluster_config::nic::shared;
    if (!pcie_ && !intra_ && c.per_server > 1)
      fail("with pcie_gbps = 0 the " + std::to_string(c.per_server) +
           " accelerators of a server need intra_gbps > 0 to reach one another");
    nics_ = shared_ ? servers_ : c.ranks;
    const link_spec pcie{bytes_per_second(c.pcie_gbps), c.server_latency_us * 1e-6};
    const link_spec intra{bytes_per_second(c.intra_gbps), c.server_latency_us * 1e-6};
    if (pcie_) {
      gpu_up_ = add(link_role::gpu_up, c.ranks, pcie);
      gpu_down_ = add(link_role::gpu_down, c.ranks, pcie);
    }
    if (intra_) {
      intra_up_ = add(link_role::intra_up, c.ranks, intra);
      intra_down_ = add(link_role::intra_down, c.ranks, intra);
    }
    if (pcie_ && shared_) {
      nic_pcie_up_ = add(link_role::nic_pcie_up, servers_, pcie);
      nic_pcie_down_ = add(link_role::nic_pcie_down, servers_, pcie);
    }
    if (!c.nic_gbps.empty() && c.nic_gbps.size() != std::size_t(nics_))
      fail("nic_gbps names " + std::to_string(c.nic_gbps.size()) + " ports for " + std::to_string(nics_) + " NICs");
    for (double gbps : c.nic_gbps)
      if (!(gbps > 0)) fail("every nic_gbps must be positive");
    nic_up_ = add_ports(link_role::nic_up);
    nic_down_ = add_ports(link_role::nic_down);
  }

  static double bytes_per_second(double gbps) { return gbps * 1e9 / 8; }
  link_spec port() const { return {bytes_per_second(config_.link_gbps), config_.latency_us * 1e-6}; }
  int nics_per_server() const { return shared_ ? 1 : config_.per_server; }

  /// One port a NIC, each at its own rate when nic_gbps names them.
  link_id add_ports(link_role role) {
    const link_id first = link_id(net.links());
    for (int nic = 0; nic < nics_; ++nic) {
      link_spec spec = port();
      if (!config_.nic_gbps.empty()) spec.bytes_per_second = bytes_per_second(config_.nic_gbps[std::size_t(nic)]);
      net.add_link(spec);
    }
    blocks_.push_back({first, link_id(nics_), role});
    return first;
  }

  link_id add(link_role role, int count, link_spec spec) {
    const link_id first = link_id(net.links());
    for (int i = 0; i < count; ++i) net.add_link(spec);
    blocks_.push_back({first, link_id(count), role});
    return first;
  }

  kind kind_;
  cluster_config config_;
  topology::bigraph shape_;
  std::vector<block> blocks_;
  int servers_ = 0, nics_ = 0;
  bool pcie_ = false, intra_ = false, shared_ = false;
  int leaves_ = 1, spines_ = 0, nics_per_leaf_ = 1, nodes_per_switch_ = 1;
  double uplink_gbps_ = 0;
  link_id gpu_up_ = 0, gpu_down_ = 0, intra_up_ = 0, intra_down_ = 0, nic_pcie_up_ = 0, nic_pcie_down_ = 0;
  link_id nic_up_ = 0, nic_down_ = 0, leaf_up_ = 0, spine_down_ = 0, bipartite_ = 0;
};

/// Every rank a private up and down link (link_gbps, latency_us) to one non-blocking
/// switch; servers are ignored. A message's time is then exactly the alpha-beta cost
/// (2 latencies, the port rate), against which the simulator is checked.
inline cluster make_contention_free(const cluster_config& config) { return cluster(config, cluster::kind::contention_free); }

/// More leaf-spine links than a fat-tree of 64-port switches could have (a hundred
/// thousand leaves of 32 uplinks): a spine count beyond that is a mistake.
inline constexpr std::int64_t max_leaf_spine_links = std::int64_t(1) << 22;

/// A two-level Clos: servers under leaves (all NICs of a server on one leaf), every leaf
/// one uplink to every spine, uplinks sized so a leaf's total uplink is its NIC ports'
/// total / oversubscription. Messages between leaves take the spine `spine_for` picks.
inline cluster make_fat_tree(const cluster_config& config) {
  cluster c(config, cluster::kind::fat_tree);
  const int per_leaf = std::min(c.servers_, config.servers_per_leaf > 0 ? config.servers_per_leaf
                                                                        : std::max(1, 32 / c.nics_per_server()));
  c.nics_per_leaf_ = per_leaf * c.nics_per_server();
  c.leaves_ = (c.servers_ + per_leaf - 1) / per_leaf;
  if (c.leaves_ > 1) {
    const double down_gbps = c.nics_per_leaf_ * config.link_gbps, up_gbps = down_gbps / config.oversubscription;
    c.spines_ = config.spines > 0 ? config.spines
                                  : std::max(1, int(std::lround(c.nics_per_leaf_ / config.oversubscription)));
    if (std::int64_t(c.spines_) * c.leaves_ > max_leaf_spine_links)
      throw error(errc::invalid_argument, "transport::simulated::cluster: " + std::to_string(c.spines_) + " spines for " +
                                              std::to_string(c.leaves_) + " leaves make more than " +
                                              std::to_string(max_leaf_spine_links) + " leaf-spine links");
    c.uplink_gbps_ = up_gbps / c.spines_;
    const link_spec up{cluster::bytes_per_second(c.uplink_gbps_), config.latency_us * 1e-6};
    c.leaf_up_ = c.add(link_role::leaf_up, c.leaves_ * c.spines_, up);
    c.spine_down_ = c.add(link_role::spine_down, c.spines_ * c.leaves_, up);
  }
  return c;
}

/// EFLOPS' BiGraph: NIC n is node n of `shape` (resolved for the number of NICs, so with
/// a NIC an accelerator rank r is node r), every link at link_gbps. Paths between NICs
/// are topology::bigraph::path's hops.
inline cluster make_bigraph(const cluster_config& config, topology::bigraph shape) {
  cluster c(config, cluster::kind::bigraph);
  c.shape_ = shape.resolved(c.nics_);
  c.shape_.check(c.nics_);
  c.nodes_per_switch_ = c.shape_.nodes_per_switch();
  const int n = c.shape_.switches();
  c.bipartite_ = c.add(link_role::bipartite, n * (n / 2), c.port());
  return c;
}

}  // namespace mimatrix::transport::simulated
