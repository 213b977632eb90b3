// Sufficient-factor broadcasting (sufficient_factor.hpp) against a ring allreduce of the full
// gradient, for a 2048×1000 fully-connected layer on inproc ranks (threads): P = 2, 4, 8 at
// K = 32, then K = 8 .. 512 at P = 4. Prints markdown tables.
//
// Bytes are per rank and per direction over a ring: SFB's allgathers send and receive
// (P−1)·K·(M+N)·4 (plus 24·(P−1) for the sizes), the allreduce 2·(P−1)/P·M·N·4. Times are
// medians over iterations, each bracketed by barriers, so the slowest rank sets them.
// "rebuild alone" times the GEMM on the same data without the allgathers; "allreduce path"
// adds what a trainer without SFB computes first: its local dW = U Vᵀ.
// Poseidon's rule counts bytes only; on a CPU the rebuild's 2·M·N·P·K flops are what decide.
// Hand-timed rather than Google Benchmark: one measurement spans P threads and their barriers.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/sufficient_factor.hpp"
#include "mimatrix/transport/inproc.hpp"

namespace {

using mimatrix::collectives;
using mimatrix::communicator;
using mimatrix::transport::inproc;

constexpr std::size_t outputs = 2048;     // M
constexpr std::size_t inputs = 1000;      // N
constexpr double work_per_run = 4e9;      // flops of rebuild a configuration may spend, all ranks
constexpr int most_iterations = 10;
constexpr int fewest_iterations = 2;

struct result {
  int ranks = 0;
  std::size_t batch = 0;
  double sfb = 0, rebuild = 0, local = 0, allreduce = 0;  // seconds
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// One configuration on `p` inproc ranks; rank 0's view of the barrier-bracketed times.
result measure(int p, std::size_t k) {
  const mimatrix::fully_connected_shape shape{outputs, inputs, k};
  const double rebuild_flops = 2.0 * double(outputs * inputs) * double(p) * double(k) * double(p);
  const int iterations = std::clamp(int(work_per_run / rebuild_flops), fewest_iterations, most_iterations);
  result out{p, k, 0, 0, 0, 0};
  mimatrix::transport::run_inproc(p, [&](int rank, inproc::world& w) {
    communicator<inproc> comm(w, rank);
    collectives<inproc> coll(comm);
    std::mt19937 gen(unsigned(rank) + 1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> u(outputs * k), v(inputs * k), dw(outputs * inputs), local(outputs * inputs);
    for (auto& x : u) x = dist(gen);
    for (auto& x : v) x = dist(gen);
    mimatrix::sufficient_factor_broadcast<inproc> sfb(coll, shape);
    std::vector<float> gathered_u(std::size_t(p) * k * outputs), gathered_v(std::size_t(p) * k * inputs);
    for (std::size_t c = 0; c < std::size_t(p); ++c) {  // the same work as the rebuild, without the allgathers
      std::copy(u.begin(), u.end(), gathered_u.begin() + std::ptrdiff_t(c * u.size()));
      std::copy(v.begin(), v.end(), gathered_v.begin() + std::ptrdiff_t(c * v.size()));
    }

    auto time = [&](const std::function<void()>& body) {
      std::vector<double> samples;
      for (int i = 0; i <= iterations; ++i) {  // the first is a warm-up
        coll.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        body();
        coll.barrier();
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
        if (i > 0) samples.push_back(took.count());
      }
      return median(samples);
    };
    const double sfb_time = time([&] { sfb(u.data(), v.data(), dw.data()); });
    const double rebuild_time = time([&] {
      mimatrix::detail::outer_product_sum(outputs, inputs, std::size_t(p) * k, gathered_u.data(), gathered_v.data(),
                                          1.0f, dw.data());
    });
    const double local_time =
        time([&] { mimatrix::detail::outer_product_sum(outputs, inputs, k, u.data(), v.data(), 1.0f, local.data()); });
    const double allreduce_time = time([&] {
      coll.allreduce(local.data(), dw.data(), local.size(), mimatrix::dtype::float32, mimatrix::reduce::op_kind::sum)
          .wait();
    });
    if (rank == 0) out = {p, k, sfb_time, rebuild_time, local_time, allreduce_time};
  });
  return out;
}

double mib(double bytes) { return bytes / double(1 << 20); }

void print_header() {
  std::printf("| P | K | SFB bytes/rank (each way) | allreduce bytes/rank (each way) | SFB ms (allgather + rebuild) "
              "| rebuild alone ms | allreduce ms | allreduce path ms (local UVᵀ + allreduce) | rule | measured |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|:---|:---|\n");
}

void print_row(const result& r) {
  const double p = r.ranks, k = double(r.batch), m = outputs, n = inputs;
  const double sfb_bytes = (p - 1) * k * (m + n) * 4 + (p - 1) * 24;
  const double allreduce_bytes = 2 * (p - 1) / p * m * n * 4;
  const double allreduce_path = r.local + r.allreduce;
  const bool pays = mimatrix::sufficient_factors_pay(r.ranks, r.batch, outputs, inputs);
  std::printf("| %d | %zu | %.2f MiB | %.2f MiB | %.2f | %.2f | %.2f | %.2f | %s | %s |\n", r.ranks, r.batch,
              mib(sfb_bytes), mib(allreduce_bytes), r.sfb * 1e3, r.rebuild * 1e3, r.allreduce * 1e3,
              allreduce_path * 1e3, pays ? "SFB" : "allreduce", r.sfb <= allreduce_path ? "SFB" : "allreduce");
}

}  // namespace

int main(int argc, char** argv) {
  // No options: say so rather than run minutes of measurements on a mistyped one.
  if (argc > 1) {
    const std::string a = argv[1];
    const bool help = a == "--help" || a == "-h";
    if (!help) std::fprintf(stderr, "sufficient_factor_bench: takes no arguments, not '%s'\n", a.c_str());
    std::fprintf(help ? stdout : stderr,
                 "usage: sufficient_factor_bench   (no options)\n"
                 "\n"
                 "Sufficient-factor broadcasting against a ring allreduce of the full gradient of a\n"
                 "2048x1000 fully-connected layer (ResNet-50's head), on P in-process ranks: P = 2, 4, 8\n"
                 "at K = 32 samples a rank, then K = 8 .. 512 at P = 4. Prints markdown tables: bytes\n"
                 "a rank sends each way ((P-1)K(M+N)4 for the factors, 2(P-1)/P MN4 for the allreduce),\n"
                 "the median time of each way, the rebuild of the gradient from the factors alone, and\n"
                 "Poseidon's rule P K (M+N) <= 2MN. docs/sufficient_factors.md reads the results.\n");
    return help ? 0 : 2;
  }
  std::printf("# sufficient factors vs allreduce, %zux%zu layer, float32, inproc ranks as threads on %u cores\n\n",
              outputs, inputs, std::thread::hardware_concurrency());
  std::printf("## K = 32, P = 2, 4, 8 (the rule: P*32*3048 <= 4096000, so SFB up to P = 41)\n\n");
  print_header();
  for (int p : {2, 4, 8}) print_row(measure(p, 32));
  std::printf("\n## P = 4, K = 8 .. 512 (the rule: 4*K*3048 <= 4096000, so SFB up to K = 335)\n\n");
  print_header();
  for (std::size_t k : {8, 16, 32, 64, 128, 256, 512}) print_row(measure(4, k));
  return 0;
}
