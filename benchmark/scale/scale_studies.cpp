// Scale studies on transport::simulated: the real schedules of every rank on modelled
// clusters, as EFLOPS (HPCA 2020) and MiMatrix (arXiv 1802.02326) measured them. Prints
// markdown tables; with --out DIR also writes DIR/<study>.dat for gnuplot.
//
//   scale_studies [--quick] [--out DIR] [--collective KIND ...] [study ...]
//   studies: speed nic topology gdraa hierarchical resnet collectives (default: all)
//   --collective reduce|gather|scatter|alltoall: what the collectives study times
//   (default: reduce and alltoall, the two crossovers)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "mimatrix/algorithm/binomial.hpp"
#include "mimatrix/algorithm/bruck.hpp"
#include "mimatrix/algorithm/gdraa.hpp"
#include "mimatrix/algorithm/halving_doubling.hpp"
#include "mimatrix/algorithm/hdrm.hpp"
#include "mimatrix/algorithm/hierarchical.hpp"
#include "mimatrix/algorithm/linear.hpp"
#include "mimatrix/algorithm/pairwise.hpp"
#include "mimatrix/algorithm/rabenseifner.hpp"
#include "mimatrix/algorithm/recursive_doubling.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/topology/bigraph.hpp"
#include "mimatrix/topology/hierarchical.hpp"
#include "mimatrix/topology/mesh.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/transport/simulated.hpp"
#include "resnet50.hpp"

namespace {

using namespace mimatrix;
using namespace mimatrix::transport::simulated;
using schedule::collective;

struct settings {
  bool quick = false;
  std::string out;                      // where .dat files go; empty: none
  std::vector<collective> collectives;  // the collectives study's; empty: reduce, alltoall
};

/// GPUs of the papers' era: reductions at 100 GB/s on the device, 3 us of software a
/// message (posting, completion), 100 Gb/s NICs, 1 us a network hop.
compute_costs gpu_costs() {
  compute_costs c;
  c.reduce_bytes_per_second = 100e9;
  c.message_overhead = 3e-6;
  return c;
}

/// One message a step: chunks pipeline reductions with transfers, but at thousands of
/// ranks their unsynchronized flows make every rate change a large max-min problem, so
/// the large studies run halving-doubling and HDRM unchunked (the bandwidth terms are
/// the same; see docs/scaling.md).
const algorithm::policy one_message{.chunk_bytes = std::size_t(1) << 40};

schedule::descriptor allreduce_of(int p, double bytes) {
  return {collective::allreduce, p, static_cast<std::size_t>(bytes / 4), 4};
}

std::string human_bytes(double b) {
  char text[32];
  if (b >= 1 << 30) std::snprintf(text, sizeof text, "%.0f GiB", b / (1 << 30));
  else if (b >= 1 << 20) std::snprintf(text, sizeof text, "%.0f MiB", b / (1 << 20));
  else if (b >= 1 << 10) std::snprintf(text, sizeof text, "%.0f KiB", b / (1 << 10));
  else std::snprintf(text, sizeof text, "%.0f B", b);
  return text;
}

std::string ms(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, seconds < 1e-3 ? "%.3f" : "%.2f", seconds * 1e3);
  return text;
}

/// A .dat file with a header line; nothing when --out is not given.
class data_file {
 public:
  data_file(const settings& s, const std::string& name, const std::string& header) {
    if (s.out.empty()) return;
    const std::string path = s.out + "/" + name + ".dat";
    out_.open(path);
    if (!out_) {  // not silently: the plots would show the last run's data
      std::fprintf(stderr, "scale_studies: cannot write %s\n", path.c_str());
      std::exit(1);
    }
    out_ << "# " << header << "\n";
  }
  template <class... T>
  void row(const T&... values) {
    if (!out_.is_open()) return;
    ((out_ << values << ' '), ...);
    out_ << "\n";
  }

 private:
  std::ofstream out_;
};

// ---- the studies ------------------------------------------------------------------------

/// How long the simulator itself takes, payload-free, for a 64 MiB allreduce: ring (the
/// done-when of issue 12: 4096 ranks) and HDRM up to 16384 ranks. A ring's steps grow as
/// p² (4p a rank): at 16384 ranks even the per-rank state is too large here.
template <class Topology, class Algorithm>
void speed_row(const char* name, int p, const Topology& topo, const Algorithm& algo, cluster net) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto plans = build_schedules(topo, algo, allreduce_of(p, 64 << 20), true);
  const double build = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::size_t steps = 0;
  for (const auto& plan : plans) steps += plan->steps.size();
  simulation sim(net, gpu_costs());
  const run_result r = sim.run(plans, reduce::host_kernels_for(dtype::float32, reduce::op_kind::sum));
  std::printf("| %s | %d | %zu | %.2f GB | %.2f | %.2f | %s |\n", name, p, steps, double(r.schedule_bytes) / 1e9, build,
              r.wall_seconds, ms(r.seconds).c_str());
  std::fflush(stdout);
}

void speed(const settings& s) {
  std::printf("## Simulator speed: payload-free 64 MiB allreduce\n\n");
  std::printf("| algorithm | ranks | steps (all ranks) | schedules | build s | simulate s | simulated time ms |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (int p : s.quick ? std::vector<int>{256, 1024} : std::vector<int>{256, 1024, 4096})
    speed_row("ring, no contention", p, topology::ring{}, algorithm::ring{},
              make_contention_free({.ranks = p, .pcie_gbps = 0}));
  for (int p : s.quick ? std::vector<int>{1024} : std::vector<int>{1024, 4096, 16384}) {
    const auto shape = topology::bigraph::for_size(p);
    speed_row("HDRM (one message a step), BiGraph", p, shape, algorithm::hdrm(one_message),
              make_bigraph({.ranks = p, .pcie_gbps = 0}, shape));
  }
  std::printf("\nRing at 16384 ranks: %.0f M steps; with one shared schedule its ranks' own state is still about "
              "%.0f GB (9 bytes a step) and the run about 16 times the 4096-rank one: left out of the study (run "
              "alone: 122-286 s to simulate, this VM varying; see \"Simulator speed\").\n\n",
              4.0 * 16384 * 16383 / 1e6, 4.0 * 16384 * 16383 * 9 / 1e9);
}

/// EFLOPS §3: a NIC shared by a server's GPUs through the PCIe root congests; one NIC per
/// GPU under its own PCIe switch does not. 16 servers of 8 GPUs on a non-blocking fat-tree.
void nic(const settings& s) {
  const int servers = 16, gpus = 8, p = servers * gpus;
  std::printf("## Shared NIC vs one NIC per GPU (%d servers x %d GPUs, 100 Gb/s, halving-doubling)\n\n", servers,
              gpus);
  std::printf("| size | shared NIC ms | NIC per GPU ms | speedup |\n|---:|---:|---:|---:|\n");
  data_file dat(s, "nic", "bytes shared_ms per_gpu_ms");
  const algorithm::halving_doubling hd;
  for (double bytes = 4096; bytes <= (s.quick ? 4 << 20 : 256 << 20); bytes *= 4) {
    double t[2];
    for (int mode = 0; mode < 2; ++mode) {
      cluster_config c{.ranks = p, .per_server = gpus};
      c.nics = mode == 0 ? cluster_config::nic::shared : cluster_config::nic::per_accelerator;
      auto net = make_fat_tree(c);
      t[mode] = simulate(net, topology::ring{}, hd, allreduce_of(p, bytes), gpu_costs()).seconds;
    }
    std::printf("| %s | %s | %s | %.1fx |\n", human_bytes(bytes).c_str(), ms(t[0]).c_str(), ms(t[1]).c_str(),
                t[0] / t[1]);
    dat.row(bytes, t[0] * 1e3, t[1] * 1e3);
    std::fflush(stdout);
  }
  std::printf("\n");
}

/// EFLOPS §4-5: ring and halving-doubling on a fat-tree whose ECMP hashing collides, vs
/// HDRM on BiGraph, where every step has a link of its own. One NIC per rank.
void topology_study(const settings& s) {
  const double bytes = 64 << 20;
  std::printf("## Fat-tree with ECMP vs BiGraph with HDRM (64 MiB allreduce, 100 Gb/s, HD and HDRM one message "
              "a step)\n\n");
  std::printf("| ranks | ring, fat-tree ms | halving-doubling, fat-tree ms | halving-doubling, BiGraph ms | "
              "HDRM, BiGraph ms | HDRM vs HD on fat-tree |\n|---:|---:|---:|---:|---:|---:|\n");
  data_file dat(s, "topology", "ranks ring_fat_tree_ms hd_fat_tree_ms hd_bigraph_ms hdrm_bigraph_ms");
  for (int p = 64; p <= (s.quick ? 256 : 4096); p *= 4) {
    auto tree = make_fat_tree({.ranks = p, .pcie_gbps = 0});
    const auto desc = allreduce_of(p, bytes);
    const double ring = simulate(tree, topology::ring{}, algorithm::ring{}, desc, gpu_costs()).seconds;
    const algorithm::halving_doubling hd(one_message);
    const double hd_tree = simulate(tree, topology::ring{}, hd, desc, gpu_costs()).seconds;
    const auto shape = topology::bigraph::for_size(p);
    auto bigraph = make_bigraph({.ranks = p, .pcie_gbps = 0}, shape);
    const double hd_bi = simulate(bigraph, topology::ring{}, hd, desc, gpu_costs()).seconds;
    const double hdrm = simulate(bigraph, shape, algorithm::hdrm(one_message), desc, gpu_costs()).seconds;
    std::printf("| %d | %s | %s | %s | %s | %.2fx |\n", p, ms(ring).c_str(),
                ms(hd_tree).c_str(), ms(hd_bi).c_str(), ms(hdrm).c_str(), hd_tree / hdrm);
    dat.row(p, ring * 1e3, hd_tree * 1e3, hd_bi * 1e3, hdrm * 1e3);
    std::fflush(stdout);
  }
  std::printf("\n");
}

/// MiMatrix: GDRAA synchronizes twice a call whatever the group; ring 2(p-1) times and
/// halving-doubling 2 lg p. Its p-1 writes at once cost LogGP's gap each and meet at
/// every receiver (incast): the price at large groups.
void gdraa_study(const settings& s) {
  std::printf("## GDRAA vs ring vs halving-doubling (non-blocking fat-tree, g = 0.5 us a message, HD one message "
              "a step)\n\n");
  std::printf("| ranks | size | GDRAA rounds | ring rounds | HD rounds | GDRAA ms | ring ms | HD ms |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  data_file dat(s, "gdraa", "ranks bytes gdraa_ms ring_ms hd_ms gdraa_rounds ring_rounds hd_rounds");
  compute_costs costs = gpu_costs();
  costs.message_gap = 0.5e-6;
  for (double bytes : {64.0 * 1024, 64.0 * 1024 * 1024}) {
    for (int p = 4; p <= (s.quick ? 64 : bytes > 1e6 ? 256 : 512); p *= 2) {
      auto tree = make_fat_tree({.ranks = p, .pcie_gbps = 0});
      const auto desc = allreduce_of(p, bytes);
      const auto g = simulate(tree, topology::mesh{}, algorithm::gdraa{}, desc, costs);
      const auto r = simulate(tree, topology::ring{}, algorithm::ring{}, desc, costs);
      const auto h = simulate(tree, topology::ring{}, algorithm::halving_doubling(one_message), desc, costs);
      std::printf("| %d | %s | %d | %d | %d | %s | %s | %s |\n", p, human_bytes(bytes).c_str(), g.message_rounds,
                  r.message_rounds, h.message_rounds, ms(g.seconds).c_str(), ms(r.seconds).c_str(),
                  ms(h.seconds).c_str());
      dat.row(p, bytes, g.seconds * 1e3, r.seconds * 1e3, h.seconds * 1e3, g.message_rounds, r.message_rounds,
              h.message_rounds);
      std::fflush(stdout);
    }
  }
  std::printf("\n");
}

/// Hierarchical (ring inside servers, ring along rails) vs flat ring and halving-doubling,
/// on servers of 8 GPUs with an NVLink-like fabric inside and a NIC per GPU.
void hierarchical_study(const settings& s) {
  const int gpus = 8;
  std::printf("## Hierarchical vs flat (servers of %d GPUs, 1200 Gb/s inside, 100 Gb/s NIC per GPU)\n\n", gpus);
  std::printf("| servers | size | flat ring ms | flat HD ms | hierarchical ms | best flat / hierarchical |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  data_file dat(s, "hierarchical", "servers bytes ring_ms hd_ms hierarchical_ms");
  using hier_topo = topology::hierarchical<topology::ring, topology::ring>;
  const algorithm::hierarchical<algorithm::ring, algorithm::ring> hier;
  for (int servers : s.quick ? std::vector<int>{4, 16} : std::vector<int>{4, 16, 64}) {
    const int p = servers * gpus;
    for (double bytes : {256.0 * 1024, 64.0 * 1024 * 1024}) {
      auto net = make_fat_tree({.ranks = p, .per_server = gpus, .intra_gbps = 1200});
      const auto desc = allreduce_of(p, bytes);
      const double ring = simulate(net, topology::ring{}, algorithm::ring{}, desc, gpu_costs()).seconds;
      const double hd = simulate(net, topology::ring{}, algorithm::halving_doubling{}, desc, gpu_costs()).seconds;
      const double h = simulate(net, hier_topo(gpus), hier, desc, gpu_costs()).seconds;
      std::printf("| %d | %s | %s | %s | %s | %.2fx |\n", servers, human_bytes(bytes).c_str(), ms(ring).c_str(),
                  ms(hd).c_str(), ms(h).c_str(), std::min(ring, hd) / h);
      dat.row(servers, bytes, ring * 1e3, hd * 1e3, h * 1e3);
      std::fflush(stdout);
    }
  }
  std::printf("\n");
}

/// ResNet-50's iteration from its layers' gradient sizes: backward on the GPU, gradients
/// bucketed (25 MiB, as PyTorch DDP), each bucket's allreduce simulated. Without overlap
/// the buckets go after the backward pass; with wait-free backpropagation (Poseidon) each
/// starts once its last layer's gradient is ready, one collective at a time.
void resnet(const settings& s) {
  const auto layers = benchmark_scale::resnet50_layers();
  const benchmark_scale::gpu_model gpu;  // V100-class, batch 32 a GPU
  const auto buckets = benchmark_scale::buckets_of(layers, 25.0 * (1 << 20));
  double compute = 0;
  for (const auto& l : layers) compute += gpu.forward(l) + gpu.backward(l);
  std::printf("## ResNet-50 iteration (batch 32 a GPU, %zu gradient buckets, compute %.1f ms)\n\n", buckets.size(),
              compute * 1e3);
  std::printf("| GPUs | network | allreduce ms (sum) | iteration, no overlap ms | iteration, overlap ms | "
              "efficiency, no overlap | efficiency, overlap |\n|---:|---|---:|---:|---:|---:|---:|\n");
  data_file dat(s, "resnet", "gpus eff_fat_ring_serial eff_fat_ring_overlap eff_bigraph_hdrm_serial eff_bigraph_hdrm_overlap");
  for (int p = 8; p <= (s.quick ? 64 : 1024); p *= 2) {
    double eff[4] = {0, 0, 0, 0};
    for (int net_kind = 0; net_kind < 2; ++net_kind) {
      std::vector<double> times;
      for (const auto& b : buckets) {
        const auto desc = allreduce_of(p, b.bytes);
        if (net_kind == 0) {
          auto tree = make_fat_tree({.ranks = p, .pcie_gbps = 0});
          times.push_back(simulate(tree, topology::ring{}, algorithm::ring{}, desc, gpu_costs()).seconds);
        } else {
          const auto shape = topology::bigraph::for_size(p);
          auto bigraph = make_bigraph({.ranks = p, .pcie_gbps = 0}, shape);
          times.push_back(simulate(bigraph, shape, algorithm::hdrm(one_message), desc, gpu_costs()).seconds);
        }
      }
      const auto it = benchmark_scale::iteration(layers, gpu, buckets, times);
      double sum = 0;
      for (double t : times) sum += t;
      std::printf("| %d | %s | %s | %s | %s | %.0f%% | %.0f%% |\n", p,
                  net_kind == 0 ? "ring, fat-tree" : "HDRM, BiGraph", ms(sum).c_str(), ms(it.serial).c_str(),
                  ms(it.overlapped).c_str(), 100 * compute / it.serial, 100 * compute / it.overlapped);
      eff[2 * net_kind] = compute / it.serial;
      eff[2 * net_kind + 1] = compute / it.overlapped;
      std::fflush(stdout);
    }
    dat.row(p, eff[0], eff[1], eff[2], eff[3]);
  }
  std::printf("\n");
}

/// Reduce, gather, scatter and alltoall at 64 ranks: every algorithm that runs the call,
/// by size (nccl-tests' size: the root's buffer, alltoall's input), on a non-blocking
/// fat-tree with a gap of 1 us a message (the model's g): where the latency-bound
/// algorithms (binomial, bruck) give way to the bandwidth-bound ones (rabenseifner,
/// pairwise). Each algorithm with its default chunks, as users run it.
template <class Algorithm>
void collective_column(collective kind, const Algorithm& algo, std::vector<std::string_view>& names,
                       std::vector<std::function<double(const schedule::descriptor&)>>& times) {
  if (!Algorithm::runs(kind)) return;
  names.push_back(Algorithm::name);
  times.push_back([algo](const schedule::descriptor& d) {
    compute_costs costs = gpu_costs();
    costs.message_gap = 1e-6;
    auto tree = make_fat_tree({.ranks = d.size, .pcie_gbps = 0});
    return simulate(tree, topology::ring{}, algo, d, costs).seconds;
  });
}

void collectives_study(const settings& s) {
  const int p = 64;
  const auto kinds = s.collectives.empty() ? std::vector{collective::reduce, collective::alltoall} : s.collectives;
  for (collective kind : kinds) {
    std::vector<std::string_view> names;
    std::vector<std::function<double(const schedule::descriptor&)>> times;
    collective_column(kind, algorithm::binomial{}, names, times);
    collective_column(kind, algorithm::rabenseifner{}, names, times);
    collective_column(kind, algorithm::linear{}, names, times);
    collective_column(kind, algorithm::bruck{}, names, times);
    collective_column(kind, algorithm::pairwise{}, names, times);
    const std::string what(schedule::to_string(kind));
    std::printf("## %s at %d ranks, simulated (non-blocking fat-tree, 100 Gb/s, g = 1 us a message)\n\n",
                what.c_str(), p);
    std::printf("| size |");
    for (auto name : names) std::printf(" %.*s ms |", int(name.size()), name.data());
    std::printf(" fastest |\n|---:|");
    for (std::size_t i = 0; i < names.size(); ++i) std::printf("---:|");
    std::printf("---|\n");
    const double blocks = kind == collective::reduce ? 1 : p;  // in the size
    for (double bytes = 4096; bytes <= (s.quick ? 1 << 20 : 64 << 20); bytes *= 4) {
      const schedule::descriptor d{kind, p, static_cast<std::size_t>(bytes / blocks / 4), 4, 0};
      std::printf("| %s |", human_bytes(bytes).c_str());
      std::vector<double> t;
      for (const auto& time : times) {
        t.push_back(time(d));
        std::printf(" %s |", ms(t.back()).c_str());
      }
      const auto best = std::size_t(std::min_element(t.begin(), t.end()) - t.begin());
      std::printf(" %.*s |\n", int(names[best].size()), names[best].data());
      std::fflush(stdout);
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  std::vector<std::string> wanted;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") s.quick = true;
    else if (a == "--out") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "scale_studies: --out needs a directory\n");
        return 2;
      }
      s.out = argv[++i];
      // The .dat files are written at the end of each study: a missing directory would
      // be found out only then, and silently.
      if (std::error_code ec; !std::filesystem::is_directory(s.out, ec)) {
        std::fprintf(stderr, "scale_studies: --out %s is not an existing directory\n", std::string(s.out).c_str());
        return 2;
      }
    } else if (a == "--collective") {
      const std::string kind = i + 1 < argc ? argv[++i] : "";
      std::size_t known = s.collectives.size();
      for (collective c : {collective::reduce, collective::gather, collective::scatter, collective::alltoall})
        if (kind == schedule::to_string(c)) s.collectives.push_back(c);
      if (s.collectives.size() == known) {
        std::fprintf(stderr, "scale_studies: --collective takes reduce, gather, scatter or alltoall, got '%s'\n",
                     kind.c_str());
        return 2;
      }
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: scale_studies [--quick] [--out DIR] [--collective reduce|gather|scatter|alltoall ...] "
                  "[speed|nic|topology|gdraa|hierarchical|resnet|collectives ...]\n");
      return 0;
    } else wanted.push_back(a);
  }
  const std::map<std::string, std::function<void(const settings&)>> studies{
      {"speed", speed},   {"nic", nic},     {"topology", topology_study}, {"gdraa", gdraa_study},
      {"hierarchical", hierarchical_study}, {"resnet", resnet}, {"collectives", collectives_study}};
  if (wanted.empty()) wanted = {"speed", "nic", "topology", "gdraa", "hierarchical", "resnet", "collectives"};
  for (const auto& name : wanted) {
    const auto it = studies.find(name);
    if (it == studies.end()) {
      std::fprintf(stderr, "scale_studies: unknown study '%s'\n", name.c_str());
      return 2;
    }
    it->second(s);
  }
  return 0;
}
