// Tests of transport::simulated's cluster models: which links a message crosses, at which rates.
#include "mimatrix/transport/simulated/cluster.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "mimatrix/algorithm/hdrm.hpp"
#include "support/refusal.hpp"

namespace MIMATRIX_UNIT_ID {

using namespace mimatrix::transport::simulated;
using mimatrix::topology::bigraph;
using nic = cluster_config::nic;

std::vector<link_id> path_of(const cluster& c, int a, int b) {
  std::vector<link_id> out;
  c.path(a, b, out);
  return out;
}

std::vector<link_role> roles_of(const cluster& c, const std::vector<link_id>& path) {
  std::vector<link_role> out;
  for (link_id l : path) out.push_back(c.info(l).role);
  return out;
}

int count_role(const cluster& c, const std::vector<link_id>& path, link_role role) {
  int n = 0;
  for (link_id l : path) n += c.info(l).role == role;
  return n;
}

constexpr double gbps(double g) { return g * 1e9 / 8; }

cluster_config config(int ranks, int per_server = 1) {
  cluster_config c;
  c.ranks = ranks;
  c.per_server = per_server;
  return c;
}

/// The rates (Gb/s) of flows started together on `pairs`, as the network shares links.
std::vector<double> rates_of(cluster& c, const std::vector<std::pair<int, int>>& pairs) {
  std::vector<link_id> path;
  std::vector<flow_id> flows;
  for (const auto& [a, b] : pairs) {
    c.path(a, b, path);
    flows.push_back(c.net.start(path, 1e6, 0));
  }
  c.net.next_finish();
  std::vector<double> out;
  for (flow_id f : flows) out.push_back(c.net.rate(f) * 8 / 1e9);
  return out;
}

TEST(cluster, contention_free_paths_are_a_private_up_and_down_link) {
  auto cfg = config(16, 4);
  cfg.link_gbps = 200;
  cfg.latency_us = 2;
  const cluster c = make_contention_free(cfg);
  EXPECT_EQ(c.net.links(), 32u);
  std::set<link_id> ups, downs;
  for (int a = 0; a < 16; ++a)
    for (int b = 0; b < 16; ++b) {
      if (a == b) continue;
      const auto p = path_of(c, a, b);
      ASSERT_EQ(p.size(), 2u);
      EXPECT_EQ(c.info(p[0]), (link_info{link_role::nic_up, a, 0}));
      EXPECT_EQ(c.info(p[1]), (link_info{link_role::nic_down, 0, b}));
      for (link_id l : p) {
        EXPECT_DOUBLE_EQ(c.net.link(l).bytes_per_second, gbps(200));
        EXPECT_DOUBLE_EQ(c.net.link(l).latency, 2e-6);
      }
      EXPECT_DOUBLE_EQ(c.net.path_latency(p), 4e-6);
      ups.insert(p[0]);
      downs.insert(p[1]);
    }
  EXPECT_EQ(ups.size(), 16u);
  EXPECT_EQ(downs.size(), 16u);
  EXPECT_TRUE(path_of(c, 3, 3).empty());
}

TEST(cluster, path_does_not_allocate_once_out_has_room) {
  auto cfg = config(256, 8);
  cfg.nics = nic::shared;
  cfg.servers_per_leaf = 2;
  const cluster fat = make_fat_tree(cfg), bi = make_bigraph(cfg);
  std::vector<link_id> out;
  out.reserve(cluster::max_path);
  const link_id* data = out.data();
  std::size_t longest = 0;
  for (const cluster* c : {&fat, &bi})
    for (int a = 0; a < 256; ++a)
      for (int b = 0; b < 256; ++b) {
        c->path(a, b, out);
        longest = std::max(longest, out.size());
        ASSERT_EQ(out.data(), data);
      }
  EXPECT_EQ(longest, cluster::max_path);  // within a BiGraph group, through shared NICs
}

TEST(cluster, fat_tree_paths_stay_in_the_leaf_or_cross_one_spine) {
  auto cfg = config(128, 4);
  cfg.servers_per_leaf = 4;  // 16 NIC ports a leaf: 8 leaves, 16 spines
  const cluster c = make_fat_tree(cfg);
  ASSERT_EQ(c.leaves(), 8);
  ASSERT_EQ(c.spines(), 16);
  for (int a = 0; a < 128; ++a)
    for (int b = 0; b < 128; ++b) {
      if (a == b) continue;
      const auto p = path_of(c, a, b);
      const int la = a / 16, lb = b / 16;
      if (a / 4 == b / 4) {
        EXPECT_EQ(roles_of(c, p), (std::vector{link_role::gpu_up, link_role::gpu_down})) << a << " " << b;
      } else if (la == lb) {
        EXPECT_EQ(roles_of(c, p), (std::vector{link_role::gpu_up, link_role::nic_up, link_role::nic_down,
                                               link_role::gpu_down}));
        EXPECT_EQ(c.info(p[1]), (link_info{link_role::nic_up, a, la}));
        EXPECT_EQ(c.info(p[2]), (link_info{link_role::nic_down, lb, b}));
      } else {
        ASSERT_EQ(roles_of(c, p), (std::vector{link_role::gpu_up, link_role::nic_up, link_role::leaf_up,
                                               link_role::spine_down, link_role::nic_down, link_role::gpu_down}));
        const int s = c.spine_for(a, b);
        EXPECT_EQ(c.info(p[2]), (link_info{link_role::leaf_up, la, s}));
        EXPECT_EQ(c.info(p[3]), (link_info{link_role::spine_down, s, lb}));
      }
    }
}

TEST(cluster, fat_tree_link_rates_and_latencies) {
  auto cfg = config(64, 2);
  cfg.servers_per_leaf = 8;
  cfg.pcie_gbps = 100;
  cfg.server_latency_us = 0.25;
  const cluster c = make_fat_tree(cfg);
  const auto p = path_of(c, 0, 63);
  ASSERT_EQ(p.size(), 6u);
  const double rates[] = {gbps(100), gbps(100), gbps(100), gbps(100), gbps(100), gbps(100)};
  const double latencies[] = {0.25e-6, 1e-6, 1e-6, 1e-6, 1e-6, 0.25e-6};
  for (std::size_t i = 0; i < p.size(); ++i) {
    EXPECT_DOUBLE_EQ(c.net.link(p[i]).bytes_per_second, rates[i]) << i;
    EXPECT_DOUBLE_EQ(c.net.link(p[i]).latency, latencies[i]) << i;
  }
  EXPECT_DOUBLE_EQ(c.net.path_latency(p), 4.5e-6);
}

TEST(cluster, ecmp_is_deterministic_and_spreads_pairs_over_every_spine) {
  auto cfg = config(512, 8);
  cfg.servers_per_leaf = 4;  // 32 NIC ports: 16 leaves, 32 spines
  const cluster c = make_fat_tree(cfg), again = make_fat_tree(cfg);
  ASSERT_EQ(c.spines(), 32);
  std::vector<int> used(32, 0);
  int pairs = 0;
  for (int a = 0; a < 512; ++a)
    for (int b = 0; b < 512; ++b) {
      if (a / 32 == b / 32) continue;
      const int s = c.spine_for(a, b);
      ASSERT_EQ(s, again.spine_for(a, b));
      ASSERT_EQ(path_of(c, a, b), path_of(again, a, b));
      ++used[std::size_t(s)];
      ++pairs;
    }
  const double mean = double(pairs) / 32;
  for (int n : used) EXPECT_NEAR(n, mean, 0.05 * mean);  // 4.5 standard deviations
  // A flow's two directions hash separately; another seed draws other spines.
  int differs = 0, reverse_differs = 0;
  auto other = cfg;
  other.ecmp_seed = 7;
  const cluster reseeded = make_fat_tree(other);
  for (int a = 0; a < 32; ++a) {
    differs += reseeded.spine_for(a, 100 + a) != c.spine_for(a, 100 + a);
    reverse_differs += c.spine_for(100 + a, a) != c.spine_for(a, 100 + a);
  }
  EXPECT_GT(differs, 20);
  EXPECT_GT(reverse_differs, 20);
}

TEST(cluster, ecmp_collisions_share_an_uplink_and_its_rate) {
  auto cfg = config(256, 8);
  cfg.servers_per_leaf = 4;  // 8 leaves of 32 NICs, 32 spines
  const cluster c = make_fat_tree(cfg);
  // Two flows from different sources on leaf 0 to distinct destinations on leaf 1 that
  // hash onto the same spine: a permutation that would fit, yet the two flows collide.
  bool found = false;
  for (int a = 0; a < 32 && !found; ++a)
    for (int b = a + 1; b < 32 && !found; ++b) {
      if (c.spine_for(a, 32 + a) != c.spine_for(b, 32 + b)) continue;
      found = true;
      const auto pa = path_of(c, a, 32 + a), pb = path_of(c, b, 32 + b);
      const std::set<link_id> sa(pa.begin(), pa.end());
      std::vector<link_id> shared;
      for (link_id l : pb)
        if (sa.count(l)) shared.push_back(l);
      ASSERT_EQ(shared.size(), 2u) << a << " " << b;  // the leaf's uplink and the spine's downlink
      EXPECT_EQ(c.info(shared[0]), (link_info{link_role::leaf_up, 0, c.spine_for(a, 32 + a)}));
      EXPECT_EQ(c.info(shared[1]), (link_info{link_role::spine_down, c.spine_for(a, 32 + a), 1}));
      cluster fresh = make_fat_tree(cfg);
      for (double r : rates_of(fresh, {{a, 32 + a}, {b, 32 + b}})) EXPECT_NEAR(r, 50, 1e-9);
    }
  EXPECT_TRUE(found) << "32 flows over 32 spines without one collision";
}

TEST(cluster, oversubscription_sets_the_uplink_rate) {
  auto cfg = config(256, 8);
  cfg.servers_per_leaf = 4;  // 32 NIC ports a leaf
  cfg.oversubscription = 2;
  const cluster halved = make_fat_tree(cfg);
  EXPECT_EQ(halved.spines(), 16);  // chosen: uplinks at port rate, half as many
  const auto p = path_of(halved, 0, 255);
  ASSERT_EQ(p.size(), 6u);
  EXPECT_DOUBLE_EQ(halved.net.link(p[2]).bytes_per_second, gbps(100));
  EXPECT_DOUBLE_EQ(halved.net.link(p[3]).bytes_per_second, gbps(100));

  cfg.spines = 4;  // given: 32 x 100 / 2 over 4 uplinks
  const cluster four = make_fat_tree(cfg);
  const auto q = path_of(four, 0, 255);
  EXPECT_DOUBLE_EQ(four.net.link(q[2]).bytes_per_second, gbps(400));
  double up = 0;
  for (link_id l = 0; l < four.net.links(); ++l)
    if (four.info(l) == link_info{link_role::leaf_up, 3, four.info(l).to}) up += four.net.link(l).bytes_per_second;
  EXPECT_DOUBLE_EQ(up, 32 * gbps(100) / 2);
  EXPECT_NE(four.describe().find("2:1"), std::string::npos) << four.describe();

  // A leaf's 32 NICs sending to another leaf's get at most half their rate between them
  // (less where ECMP puts more flows on one spine than on another).
  cluster busy = make_fat_tree(cfg);
  std::vector<std::pair<int, int>> pairs;
  for (int a = 0; a < 32; ++a) pairs.push_back({a, 32 + a});
  double total = 0;
  for (double r : rates_of(busy, pairs)) total += r;
  EXPECT_LE(total, 32 * 100 / 2 + 1e-6);
  EXPECT_GT(total, 32 * 100 / 2 * 0.75);
}

TEST(cluster, a_shared_nic_carries_all_of_its_servers_traffic) {
  auto cfg = config(64, 8);
  cfg.servers_per_leaf = 4;
  cfg.nics = nic::shared;
  const cluster shared = make_fat_tree(cfg);
  cfg.nics = nic::per_accelerator;
  const cluster own = make_fat_tree(cfg);
  EXPECT_EQ(shared.nics(), 8);
  EXPECT_EQ(own.nics(), 64);
  std::set<link_id> shared_nic_links, own_nic_links, root_links;
  for (int g = 0; g < 8; ++g) {
    const auto p = path_of(shared, g, 8 + g);  // server 0 to server 1, same leaf
    EXPECT_EQ(roles_of(shared, p), (std::vector{link_role::gpu_up, link_role::nic_pcie_up, link_role::nic_up,
                                                link_role::nic_down, link_role::nic_pcie_down, link_role::gpu_down}));
    root_links.insert(p[1]);
    shared_nic_links.insert(p[2]);
    own_nic_links.insert(path_of(own, g, 8 + g)[1]);
    EXPECT_EQ(count_role(own, path_of(own, g, 8 + g), link_role::nic_pcie_up), 0);
  }
  EXPECT_EQ(shared_nic_links.size(), 1u);
  EXPECT_EQ(root_links.size(), 1u);
  EXPECT_EQ(own_nic_links.size(), 8u);
  EXPECT_EQ(shared.info(*shared_nic_links.begin()), (link_info{link_role::nic_up, 0, 0}));
  EXPECT_DOUBLE_EQ(shared.net.link(*root_links.begin()).bytes_per_second, gbps(128));
}

TEST(cluster, a_shared_nic_divides_its_port_among_the_servers_gpus) {
  auto cfg = config(64, 8);
  cfg.servers_per_leaf = 4;
  std::vector<std::pair<int, int>> pairs;
  for (int g = 0; g < 8; ++g) pairs.push_back({g, 8 + g});
  cfg.nics = nic::shared;
  cluster shared = make_fat_tree(cfg);
  for (double r : rates_of(shared, pairs)) EXPECT_NEAR(r, 100.0 / 8, 1e-9);
  cfg.nics = nic::per_accelerator;
  cluster own = make_fat_tree(cfg);
  for (double r : rates_of(own, pairs)) EXPECT_NEAR(r, 100, 1e-9);
}

TEST(cluster, traffic_inside_a_server_avoids_the_nics) {
  for (const nic n : {nic::per_accelerator, nic::shared})
    for (const double intra : {0.0, 2400.0}) {
      auto cfg = config(32, 8);
      cfg.nics = n;
      cfg.intra_gbps = intra;
      const auto check = [&](const cluster& c) {
        for (int a = 0; a < 8; ++a)
          for (int b = 0; b < 8; ++b) {
            if (a == b) continue;
            const auto p = path_of(c, 8 + a, 8 + b);
            const auto up = intra > 0 ? link_role::intra_up : link_role::gpu_up;
            const auto down = intra > 0 ? link_role::intra_down : link_role::gpu_down;
            ASSERT_EQ(p.size(), 2u);
            EXPECT_EQ(c.info(p[0]), (link_info{up, 8 + a, 1}));
            EXPECT_EQ(c.info(p[1]), (link_info{down, 1, 8 + b}));
            EXPECT_DOUBLE_EQ(c.net.link(p[0]).bytes_per_second, gbps(intra > 0 ? intra : 128));
          }
      };
      check(make_fat_tree(cfg));
      check(make_bigraph(cfg));
    }
}

TEST(cluster, bigraph_paths_are_the_topologys_hops) {
  auto cfg = config(64);
  cfg.pcie_gbps = 0;  // a rank is its NIC, as in topology::bigraph
  const bigraph shape = bigraph::for_size(64);  // 16 switches of 4
  const cluster c = make_bigraph(cfg, shape);
  EXPECT_EQ(c.net.links(), std::size_t(2 * 64 + 16 * 8));
  for (int a = 0; a < 64; ++a)
    for (int b = 0; b < 64; ++b) {
      const auto p = path_of(c, a, b);
      const auto hops = shape.path(a, b);
      ASSERT_EQ(p.size(), hops.size());
      for (std::size_t i = 0; i < p.size(); ++i) {
        const auto [role, from, to] = c.info(p[i]);
        const auto& h = hops[i];
        const link_role want = h.bipartite() ? link_role::bipartite : h.to.is_switch ? link_role::nic_up
                                                                                     : link_role::nic_down;
        EXPECT_EQ(role, want);
        EXPECT_EQ(from, h.from.index);
        EXPECT_EQ(to, h.to.index);
      }
      if (a == b) continue;
      const int sa = shape.switch_of(a), sb = shape.switch_of(b);
      if (sa == sb) {
        EXPECT_EQ(p.size(), 2u);
      } else if (shape.group_of(a) != shape.group_of(b)) {
        ASSERT_EQ(p.size(), 3u);
        EXPECT_EQ(p[1], c.bipartite_link(sa, sb));
      } else {
        ASSERT_EQ(p.size(), 4u);
        EXPECT_NE(shape.group_of_switch(c.info(p[1]).to), shape.group_of(a));
      }
    }
  // The bipartite link between two switches is the only link joining them.
  std::map<std::pair<int, int>, int> joining;
  for (link_id l = 0; l < c.net.links(); ++l) {
    const auto i = c.info(l);
    if (i.role != link_role::bipartite) continue;
    EXPECT_NE(shape.group_of_switch(i.from), shape.group_of_switch(i.to));
    ++joining[{i.from, i.to}];
  }
  EXPECT_EQ(joining.size(), 2u * 8 * 8);
  for (const auto& [ends, n] : joining) EXPECT_EQ(n, 1);
}

TEST(cluster, bigraph_paths_with_pcie_add_the_server_hops) {
  auto cfg = config(64);
  const cluster c = make_bigraph(cfg);  // shape from the size
  EXPECT_EQ(c.shape().switches(), 16);
  const auto p = path_of(c, 0, 63);  // switch 0 (group 0) to switch 15 (group 1)
  EXPECT_EQ(roles_of(c, p), (std::vector{link_role::gpu_up, link_role::nic_up, link_role::bipartite,
                                         link_role::nic_down, link_role::gpu_down}));
  EXPECT_EQ(p[2], c.bipartite_link(0, 15));
}

/// The directed bipartite links each HDRM step's flows cross, one vector a step.
std::vector<std::vector<link_id>> hdrm_bipartite_links(const cluster& c, int p) {
  const auto order = mimatrix::algorithm::hdrm::order(c.shape(), p);
  std::vector<std::vector<link_id>> steps;
  for (int k = 1; k < p; k *= 2) {
    auto& links = steps.emplace_back();
    for (int v = 0; v < p; ++v) {
      const auto path = path_of(c, order[std::size_t(v)], order[std::size_t(v ^ k)]);
      for (link_id l : path)
        if (c.info(l).role == link_role::bipartite) links.push_back(l);
      EXPECT_EQ(count_role(c, path, link_role::bipartite), 1) << "step " << k << " v " << v;
    }
  }
  return steps;
}

TEST(cluster, hdrm_pairs_use_distinct_bipartite_links_at_every_step) {
  for (const int p : {8, 64, 256, 1024}) {
    auto cfg = config(p);
    const cluster c = make_bigraph(cfg, bigraph::for_size(p));
    ASSERT_TRUE(c.shape().distinct_links());
    for (const auto& links : hdrm_bipartite_links(c, p)) {
      ASSERT_EQ(links.size(), std::size_t(p));
      EXPECT_EQ(std::set<link_id>(links.begin(), links.end()).size(), links.size()) << p;
    }
  }
  // So every flow of a step runs at the port rate, all of them at once.
  auto cfg64 = config(64);
  const auto order = mimatrix::algorithm::hdrm::order(bigraph::for_size(64), 64);
  for (int k = 1; k < 64; k *= 2) {
    cluster c = make_bigraph(cfg64, bigraph::for_size(64));
    std::vector<std::pair<int, int>> pairs;
    for (int v = 0; v < 64; ++v) pairs.push_back({order[std::size_t(v)], order[std::size_t(v ^ k)]});
    for (double r : rates_of(c, pairs)) EXPECT_NEAR(r, 100, 1e-9) << "step " << k;
  }
  // With M > N/2 the mapping still crosses groups, but flows share links.
  auto cfg = config(16);
  const cluster crowded = make_bigraph(cfg, bigraph(4, 4));
  ASSERT_FALSE(crowded.shape().distinct_links());
  bool shares = false;
  for (const auto& links : hdrm_bipartite_links(crowded, 16))
    shares |= std::set<link_id>(links.begin(), links.end()).size() < links.size();
  EXPECT_TRUE(shares);
}

TEST(cluster, bigraph_with_shared_nics_makes_servers_its_nodes) {
  auto cfg = config(64, 8);
  cfg.nics = nic::shared;
  const cluster c = make_bigraph(cfg);
  EXPECT_EQ(c.nics(), 8);
  EXPECT_EQ(c.shape().capacity(), 8);
  const auto p = path_of(c, 5, 60);  // server 0 (node 0) to server 7 (node 7)
  EXPECT_EQ(roles_of(c, p), (std::vector{link_role::gpu_up, link_role::nic_pcie_up, link_role::nic_up,
                                         link_role::bipartite, link_role::nic_down, link_role::nic_pcie_down,
                                         link_role::gpu_down}));
  EXPECT_EQ(c.info(p[2]), (link_info{link_role::nic_up, 0, c.shape().switch_of(0)}));
}

TEST(cluster, a_16384_rank_fat_tree_stays_small) {
  auto cfg = config(16384, 8);
  const cluster c = make_fat_tree(cfg);
  std::printf("%s: %zu links\n", c.describe().c_str(), c.net.links());
  EXPECT_EQ(c.leaves(), 512);
  EXPECT_EQ(c.spines(), 32);
  // 2 PCIe + 2 NIC links a rank, 2 a leaf and spine.
  EXPECT_EQ(c.net.links(), std::size_t(4 * 16384 + 2 * 512 * 32));
  std::vector<link_id> out;
  out.reserve(cluster::max_path);
  c.path(0, 16383, out);
  EXPECT_EQ(out.size(), 6u);

  auto small = config(16);
  small.per_server = 4;
  const cluster one_leaf = make_fat_tree(small);
  EXPECT_EQ(one_leaf.leaves(), 1);
  EXPECT_EQ(one_leaf.spines(), 0);
  EXPECT_EQ(path_of(one_leaf, 0, 15).size(), 4u);
}

TEST(cluster, describe_says_what_was_built) {
  auto cfg = config(1024, 8);
  cfg.oversubscription = 2;
  const std::string fat = make_fat_tree(cfg).describe();
  EXPECT_NE(fat.find("fat-tree: 32 leaves x 4 servers x 8 GPUs (a NIC each), 16 spines, 100 Gb/s ports, 2:1"),
            std::string::npos)
      << fat;
  const std::string bi = make_bigraph(config(64)).describe();
  EXPECT_NE(bi.find("bigraph: 2 x 8 switches x 4 nodes"), std::string::npos) << bi;
  const std::string free = make_contention_free(config(8)).describe();
  EXPECT_NE(free.find("contention-free: 8 ranks"), std::string::npos) << free;
  const auto c = make_fat_tree(cfg);
  EXPECT_EQ(c.describe(link_id(0)), "rank 0 -> server pcie 0");
}

TEST(cluster, bad_configurations_throw_invalid_argument) {
  const auto throws = [](auto make) {
    try {
      make();
    } catch (const mimatrix::error& e) {
      return e.code() == mimatrix::errc::invalid_argument;
    }
    return false;
  };
  EXPECT_TRUE(throws([] { return make_fat_tree(config(0)); }));
  EXPECT_TRUE(throws([] { return make_fat_tree(config(8, 0)); }));
  EXPECT_TRUE(throws([] {
    auto cfg = config(16, 4);
    cfg.pcie_gbps = 0;  // and no intra fabric: GPUs of a server cannot reach one another
    return make_bigraph(cfg);
  }));
  EXPECT_TRUE(throws([] {
    auto cfg = config(16);
    cfg.oversubscription = 0;
    return make_fat_tree(cfg);
  }));
  EXPECT_TRUE(throws([] { return make_bigraph(config(64), bigraph(4, 2)); }));  // 8 nodes
  const auto c = make_contention_free(config(4));
  EXPECT_TRUE(throws([&] { return c.info(link_id(c.net.links())); }));
}

// Mixed hosts (the emulated cluster of benchmark/emulate): one host's slower port holds
// back exactly the flows that cross it.
TEST(cluster, a_nic_of_its_own_rate_limits_only_the_flows_through_it) {
  auto cfg = config(8, 2);
  cfg.nics = cluster_config::nic::shared;
  cfg.servers_per_leaf = 4;  // one switch, no spines
  cfg.nic_gbps = {10, 10, 10, 5};
  auto c = make_fat_tree(cfg);
  const auto r = rates_of(c, {{0, 2}, {6, 4}, {3, 1}});
  EXPECT_NEAR(r[0], 10, 1e-9);
  EXPECT_NEAR(r[1], 5, 1e-9);  // leaves host 3 at its 5 Gb/s
  EXPECT_NEAR(r[2], 10, 1e-9);
  cfg.nic_gbps = {10, 10};
  EXPECT_THROW((void)make_fat_tree(cfg), mimatrix::error);
  // A contention-free cluster's ports all run at link_gbps: rates given for them were
  // dropped without a word (a black-box test).
  cfg.nic_gbps = {10, 10, 10, 5};
  EXPECT_NE(mimatrix::test::refusal([&] { (void)make_contention_free(cfg); }).find("nic_gbps"), std::string::npos);
}

// Found by a black-box test: 10^8 spines made the cluster build its links for ever.
TEST(cluster, a_spine_count_no_fat_tree_could_have_is_refused) {
  auto cfg = config(128);
  cfg.spines = 100'000'000;
  EXPECT_NE(mimatrix::test::refusal([&] { (void)make_fat_tree(cfg); }).find("100000000 spines"), std::string::npos);
  cfg.spines = 64;
  EXPECT_EQ(make_fat_tree(cfg).spines(), 64);
}

}  // namespace
