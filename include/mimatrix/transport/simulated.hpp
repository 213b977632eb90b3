// transport::simulated: the real schedules of a whole group, run by the one step executor
// on a modelled cluster (network/cluster.hpp) in simulated time, for scale studies of
// thousands of ranks. The schedules are the ones every other transport runs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/topology/bigraph.hpp"
#include "mimatrix/transport/simulated/cluster.hpp"
#include "mimatrix/transport/simulated/compute_costs.hpp"
#include "mimatrix/transport/simulated/network.hpp"
#include "mimatrix/transport/simulated/simulation.hpp"

namespace mimatrix::transport::simulated {

/// Whether `b` is `a` with every rank moved `shift` places around the group: the same
/// steps, dependencies, tags and sizes, each peer shifted. A ring's schedules are; which
/// bytes of the buffers a step covers may differ, which only payloads see.
inline bool is_rotation(const schedule::schedule& a, const schedule::schedule& b, int shift) {
  const int p = a.desc.size;
  if (a.steps.size() != b.steps.size() || a.dep_ids != b.dep_ids || a.dep_begin != b.dep_begin ||
      a.scratch_bytes != b.scratch_bytes)
    return false;
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    const schedule::step &x = a.steps[i], &y = b.steps[i];
    if (x.kind != y.kind || x.tag != y.tag || x.count != y.count || x.src.bytes != y.src.bytes ||
        x.dst.bytes != y.dst.bytes || x.src.where != y.src.where || x.dst.where != y.dst.where)
      return false;
    if (schedule::has_peer(x.kind) && y.peer != (x.peer + shift) % p) return false;
  }
  return true;
}

/// Every rank's schedule of `algorithm` on `topology` for `desc`, built on every core.
/// With `share_rotations` (runs without payload), a rank's schedule that is_rotation() of
/// rank 0's is checked, dropped, and rank 0's shared in its place: a ring of 4096 ranks
/// then holds one schedule instead of 4 GB of them.
template <class Topology, class Algorithm>
std::vector<std::shared_ptr<const schedule::schedule>> build_schedules(const Topology& topology,
                                                                       const Algorithm& algorithm,
                                                                       const schedule::descriptor& desc,
                                                                       bool share_rotations = false) {
  if (desc.size < 1)
    throw error(errc::invalid_argument,
                "transport::simulated: a group needs at least one rank, got " + std::to_string(desc.size));
  std::vector<std::shared_ptr<const schedule::schedule>> plans(std::size_t(desc.size));
  plans[0] = std::make_shared<const schedule::schedule>(algorithm.build(topology, desc, 0));
  const int workers = std::clamp(int(std::thread::hardware_concurrency()), 1, std::max(1, desc.size / 64));
  // A build that throws on a worker thread is rethrown here, not std::terminate().
  std::vector<std::exception_ptr> failed(static_cast<std::size_t>(workers));
  const auto build_from = [&](int first) {
    try {
      for (int r = first; r < desc.size; r += workers) {
        if (r == 0) continue;
        auto mine = algorithm.build(topology, desc, r);
        if (share_rotations && is_rotation(*plans[0], mine, r))
          plans[std::size_t(r)] = plans[0];
        else
          plans[std::size_t(r)] = std::make_shared<const schedule::schedule>(std::move(mine));
      }
    } catch (...) {
      failed[std::size_t(first)] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < workers; ++w) threads.emplace_back(build_from, w);
  build_from(0);
  for (auto& t : threads) t.join();
  for (const auto& e : failed)
    if (e) std::rethrow_exception(e);
  return plans;
}

/// One call of `algorithm` on `topology` by every rank of `net`, without payloads: only
/// time moves. (simulation::run with buffers moves and checks real data.)
/// Throws invalid_argument when a BiGraph topology's shape is not that of the BiGraph
/// cluster it runs on (a rank a NIC): HDRM maps its steps to links of the one and would be
/// timed on the other's, without a word (found by a black-box test).
inline void check_same_shape(const cluster& net, const topology::bigraph& topology, int size) {
  if (net.model() != cluster::kind::bigraph || net.nics() != size) return;
  const topology::bigraph mine = topology.resolved(size), theirs = net.shape();
  if (mine.switches() == theirs.switches() && mine.nodes_per_switch() == theirs.nodes_per_switch()) return;
  const auto text = [](const topology::bigraph& b) {
    return "2 x " + std::to_string(b.switches() / 2) + " switches x " + std::to_string(b.nodes_per_switch()) + " nodes";
  };
  throw error(errc::invalid_argument, "simulate: the topology's BiGraph (" + text(mine) + ") is not the cluster's (" +
                                          text(theirs) + "): build both from one topology::bigraph");
}

template <class Topology, class Algorithm>
run_result simulate(cluster& net, const Topology& topology, const Algorithm& algorithm,
                    const schedule::descriptor& desc, const compute_costs& costs = {}) {
  if constexpr (std::is_same_v<Topology, topology::bigraph>) check_same_shape(net, topology, desc.size);
  const auto plans = build_schedules(topology, algorithm, desc, true);
  simulation sim(net, costs);
  return sim.run(plans, reduce::host_kernels_for(dtype::float32, reduce::op_kind::sum));
}

}  // namespace mimatrix::transport::simulated
