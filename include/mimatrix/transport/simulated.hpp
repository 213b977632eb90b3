// transport::simulated: the real schedules of a whole group, run by the one step executor
// on a modelled cluster (network/cluster.hpp) in simulated time, for scale studies of
// thousands of ranks. The schedules are the ones every other transport runs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/transport/simulated/cluster.hpp"
#include "mimatrix/transport/simulated/compute_costs.hpp"
#include "mimatrix/transport/simulated/network.hpp"
#include "mimatrix/transport/simulated/simulation.hpp"

namespace mimatrix::transport::simulated {

/// Every rank's schedule of `algorithm` on `topology` for `desc`, built on every core.
template <class Topology, class Algorithm>
std::vector<std::shared_ptr<const schedule::schedule>> build_schedules(const Topology& topology,
                                                                       const Algorithm& algorithm,
                                                                       const schedule::descriptor& desc) {
  std::vector<std::shared_ptr<const schedule::schedule>> plans(std::size_t(desc.size));
  const int workers = std::clamp(int(std::thread::hardware_concurrency()), 1, std::max(1, desc.size / 64));
  const auto build_from = [&](int first) {
    for (int r = first; r < desc.size; r += workers)
      plans[std::size_t(r)] = std::make_shared<const schedule::schedule>(algorithm.build(topology, desc, r));
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < workers; ++w) threads.emplace_back(build_from, w);
  build_from(0);
  for (auto& t : threads) t.join();
  return plans;
}

/// One call of `algorithm` on `topology` by every rank of `net`, without payloads: only
/// time moves. (simulation::run with buffers moves and checks real data.)
template <class Topology, class Algorithm>
run_result simulate(cluster& net, const Topology& topology, const Algorithm& algorithm,
                    const schedule::descriptor& desc, const compute_costs& costs = {}) {
  const auto plans = build_schedules(topology, algorithm, desc);
  simulation sim(net, costs);
  return sim.run(plans, reduce::host_kernels_for(dtype::float32, reduce::op_kind::sum));
}

}  // namespace mimatrix::transport::simulated
