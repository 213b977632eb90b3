// Shared by the simulated transport's timing tests: the cost model's network as a cluster
// without contention, so that a simulated call and its α-β-γ prediction can be compared.
#pragma once

#include "mimatrix/model/cost.hpp"
#include "mimatrix/transport/simulated/cluster.hpp"
#include "mimatrix/transport/simulated/compute_costs.hpp"

namespace mimatrix::test {

/// The model's network as a cluster without contention: every message costs α (here the
/// software overhead, links have no latency), n·β over private links, n·γ to reduce.
struct contention_free_case {
  model::network net;
  transport::simulated::compute_costs costs;
  transport::simulated::cluster_config config;

  explicit contention_free_case(int p) {
    net.link = model::link_model::from_rates(5e-6, 10e9, 20e9);
    net.message_gap = 0;
    costs.reduce_bytes_per_second = 20e9;
    costs.message_overhead = 5e-6;
    config = {.ranks = p, .link_gbps = 10e9 * 8 / 1e9, .latency_us = 0, .pcie_gbps = 0};
  }
};

}  // namespace mimatrix::test
