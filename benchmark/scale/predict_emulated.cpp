// The simulator's prediction for every run of benchmark/emulate/emulated_cluster.sh, side
// by side with what was measured: hosts as servers with one (shared) port each on one
// switch, each port at its tc rate, ranks of a host talking over loopback.
//
//   predict_emulated CLUSTER_JSON MEASURED_CSV [--alpha-us A] [--reduce-gbs R] [--loopback-gbps L]
//
// α (a message's software and TCP latency, which the emulation does not cap) is fitted on
// the smallest measured ring allreduce unless given: its time beyond the simulated time
// without α, over its 2(p-1) message rounds. The table is markdown.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "mimatrix/algorithm/gdraa.hpp"
#include "mimatrix/algorithm/halving_doubling.hpp"
#include "mimatrix/algorithm/hdrm.hpp"
#include "mimatrix/algorithm/recursive_doubling.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/topology/bigraph.hpp"
#include "mimatrix/topology/mesh.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/transport/simulated.hpp"

namespace {

using namespace mimatrix;
using namespace mimatrix::transport::simulated;

struct measured_run {
  std::string algorithm;
  double bytes = 0;
  int ranks = 0, hosts = 0, ranks_per_host = 0, slow_host = -1;
  double gbps = 0, slow_gbps = 0, time_us = 0;
};

std::vector<measured_run> read_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<measured_run> runs;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream s(line);
    for (std::string cell; std::getline(s, cell, ',');) f.push_back(cell);
    if (f.size() < 10) continue;
    measured_run r;
    r.algorithm = f[0];
    r.bytes = std::stod(f[1]);
    r.ranks = std::stoi(f[2]);
    r.hosts = std::stoi(f[3]);
    r.ranks_per_host = std::stoi(f[4]);
    r.gbps = std::stod(f[5]);
    r.slow_host = std::stoi(f[6]);
    r.slow_gbps = std::stod(f[7]);
    r.time_us = std::stod(f[8]);
    runs.push_back(r);
  }
  return runs;
}

/// A number after `"key":` in a flat JSON text; `fallback` when absent.
double json_number(const std::string& text, const std::string& key, double fallback) {
  const auto at = text.find("\"" + key + "\"");
  if (at == std::string::npos) return fallback;
  const auto colon = text.find(':', at);
  return colon == std::string::npos ? fallback : std::strtod(text.c_str() + colon + 1, nullptr);
}

struct model_settings {
  double alpha = -1;           // seconds; < 0: calibrated
  double reduce = 2e9;         // bytes a second a rank reduces (CPU, shared cores)
  double loopback_gbps = 20;   // between ranks of one host
  double payload_fraction = 1; // TCP/IP's share of a capped link's bytes
};

cluster cluster_for(const measured_run& r, const model_settings& m) {
  cluster_config c;
  c.ranks = r.ranks;
  c.per_server = r.ranks_per_host;
  c.nics = cluster_config::nic::shared;  // one veth a host
  c.servers_per_leaf = r.hosts;          // one bridge
  c.latency_us = 0;
  c.server_latency_us = 0;
  c.pcie_gbps = m.loopback_gbps;
  c.link_gbps = r.gbps * m.payload_fraction;
  c.nic_gbps.assign(std::size_t(r.hosts), c.link_gbps);
  if (r.slow_host >= 0 && r.slow_host < r.hosts) c.nic_gbps[std::size_t(r.slow_host)] = r.slow_gbps * m.payload_fraction;
  return make_fat_tree(c);
}

/// Seconds the simulator predicts, or < 0 for an algorithm it is not given here.
double predict(const measured_run& r, const model_settings& m) {
  auto net = cluster_for(r, m);
  compute_costs costs;
  costs.reduce_bytes_per_second = m.reduce;
  costs.message_overhead = m.alpha;
  const schedule::descriptor d{schedule::collective::allreduce, r.ranks, std::size_t(r.bytes / 4), 4};
  const algorithm::policy rxm{.chunk_bytes = std::size_t(1) << 20};  // the fabric transport's over rxm
  if (r.algorithm == "ring") return simulate(net, topology::ring{}, algorithm::ring(rxm), d, costs).seconds;
  if (r.algorithm == "halving_doubling")
    return simulate(net, topology::ring{}, algorithm::halving_doubling(rxm), d, costs).seconds;
  if (r.algorithm == "recursive_doubling")
    return simulate(net, topology::ring{}, algorithm::recursive_doubling{}, d, costs).seconds;
  if (r.algorithm == "gdraa") return simulate(net, topology::mesh{}, algorithm::gdraa{}, d, costs).seconds;
  if (r.algorithm == "hdrm") return simulate(net, topology::bigraph{}, algorithm::hdrm(rxm), d, costs).seconds;
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: predict_emulated CLUSTER_JSON MEASURED_CSV [--alpha-us A] [--reduce-gbs R] "
                         "[--loopback-gbps L]\n");
    return 2;
  }
  model_settings m;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const double v = std::stod(argv[i + 1]);
    if (flag == "--alpha-us") m.alpha = v * 1e-6;
    else if (flag == "--reduce-gbs") m.reduce = v * 1e9;
    else if (flag == "--loopback-gbps") m.loopback_gbps = v;
  }
  try {
    std::ifstream json(argv[1]);
    const std::string text((std::istreambuf_iterator<char>(json)), std::istreambuf_iterator<char>());
    m.payload_fraction = json_number(text, "payload_fraction", 1);
    const auto runs = read_csv(argv[2]);
    if (runs.empty()) throw std::runtime_error("no runs in " + std::string(argv[2]));
    if (m.alpha < 0) {
      // Fitted on the smallest ring allreduce: what it took beyond the simulated time
      // without α, over its 2(p-1) rounds.
      const measured_run* smallest = nullptr;
      for (const auto& r : runs)
        if (r.algorithm == "ring" && (!smallest || r.bytes < smallest->bytes)) smallest = &r;
      m.alpha = 0;
      if (smallest)
        m.alpha = std::max(0.0, (smallest->time_us * 1e-6 - predict(*smallest, m)) / (2.0 * (smallest->ranks - 1)));
    }
    const auto& first = runs.front();
    std::printf("Emulated cluster: %d hosts x %d ranks, %.2f Gb/s links (host %d at %.2f Gb/s), TCP payload "
                "%.3f of the line rate; model: alpha %.1f us a message (%s), reduction %.1f GB/s, loopback %.0f "
                "Gb/s.\n\n",
                first.hosts, first.ranks_per_host, first.gbps, first.slow_host, first.slow_gbps, m.payload_fraction,
                m.alpha * 1e6, argc > 3 ? "given" : "fitted on the smallest ring", m.reduce / 1e9, m.loopback_gbps);
    std::printf("| algorithm | size | measured ms | simulated ms | error |\n|---|---:|---:|---:|---:|\n");
    for (const auto& r : runs) {
      const double predicted = predict(r, m);
      if (predicted < 0) continue;
      const double measured = r.time_us * 1e-6;
      std::printf("| %s | %.0f | %.3f | %.3f | %+.0f%% |\n", r.algorithm.c_str(), r.bytes, measured * 1e3,
                  predicted * 1e3, 100 * (predicted - measured) / measured);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "predict_emulated: %s\n", e.what());
    return 1;
  }
  return 0;
}
