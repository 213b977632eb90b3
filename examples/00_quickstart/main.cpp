// Quick start: a ring allreduce of float gradients across ranks that are threads of
// this process, checked element by element and timed in nccl-tests' columns.
//
//   quickstart [ranks=4] [max_bytes=64M]
#include <mimatrix/mimatrix.hpp>

#include "../strict_number.hpp"

#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace mx = mimatrix;
using mx::transport::inproc;
using ring_sum = mx::allreduce<inproc, mx::topology::ring, mx::reduce::sum<float>>;

namespace {

// "64M", "1K", "4096": a whole size in bytes, K/M/G powers of 1024.
std::size_t parse_bytes(const std::string& text) {
  std::string digits = text;
  std::int64_t unit = 1;
  if (!digits.empty()) switch (digits.back()) {
      case 'K': case 'k': unit = std::int64_t{1} << 10; break;
      case 'M': case 'm': unit = std::int64_t{1} << 20; break;
      case 'G': case 'g': unit = std::int64_t{1} << 30; break;
      default: break;
    }
  if (unit != 1) digits.pop_back();
  const std::int64_t max = (std::int64_t{1} << 40) / unit;  // a terabyte: beyond any test here
  std::size_t bytes = 0;
  try {
    bytes = std::size_t(mx::examples::parse_integer("max_bytes", digits, 1, max) * unit);
  } catch (const std::invalid_argument&) {
    bytes = 0;
  }
  // The sweep starts at 1K: below it nothing would run, and "all results exact" would be
  // printed over no results (a black-box test).
  if (bytes < 1024)
    throw std::invalid_argument("max_bytes takes a size such as 4096, 64K or 64M (at least 1K, at most 1T), not '" +
                                text + "'");
  return bytes;
}

void print_usage() { std::printf("usage: quickstart [ranks=4, 1..256] [max_bytes=64M]\n"); }

}  // namespace

int main(int argc, char** argv) {
  int ranks = 4;
  std::size_t max_bytes = std::size_t(64) << 20;
  try {
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") return print_usage(), 0;
    if (argc > 3) throw std::invalid_argument("at most two arguments");
    // Threads of this process: a few hundred is already far past the cores.
    if (argc > 1) ranks = int(mx::examples::parse_integer("ranks", argv[1], 1, 256));
    if (argc > 2) max_bytes = parse_bytes(argv[2]);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "quickstart: %s\n", e.what());
    print_usage();
    return 2;
  }
  std::printf("# mimatrix %d.%d.%d quick start: ring allreduce, %d in-process ranks\n", MIMATRIX_VERSION_MAJOR,
              MIMATRIX_VERSION_MINOR, MIMATRIX_VERSION_PATCH, ranks);
  std::printf("# busbw = algbw * 2(p-1)/p, as in nccl-tests; #wrong counts elements off the exact sum\n");
  std::printf("#%11s %12s %8s %6s %6s %10s %9s %9s %7s\n", "size", "count", "type", "redop", "root", "time(us)",
              "algbw", "busbw", "#wrong");

  std::barrier sync(ranks);
  std::vector<double> seconds(ranks);
  std::vector<std::size_t> wrong(ranks);
  int failures = 0;
  try {
    mx::transport::run_inproc(ranks, [&](int rank, inproc::world& world) {
      mx::communicator<inproc> comm(world, rank);
      ring_sum sum(comm);
      for (std::size_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
        const std::size_t count = bytes / sizeof(float);
        // Small integers in floats: every partial sum is exact, so the check is exact.
        std::vector<float> grads(count);
        for (std::size_t i = 0; i < count; ++i) grads[i] = static_cast<float>((i + rank) % 7);
        sum(grads);  // the first call builds and caches the schedule; check its result
        wrong[rank] = 0;
        for (std::size_t i = 0; i < count; ++i) {
          double expected = 0;
          for (int r = 0; r < ranks; ++r) expected += static_cast<double>((i + r) % 7);
          if (static_cast<double>(grads[i]) != expected) ++wrong[rank];
        }
        const int iterations = bytes < (1 << 20) ? 50 : 5;
        sync.arrive_and_wait();
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < iterations; ++i) sum(grads);
        sync.arrive_and_wait();
        seconds[rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
        sync.arrive_and_wait();
        if (rank == 0) {
          std::size_t total_wrong = 0;
          for (auto w : wrong) total_wrong += w;
          const double t = seconds[0];
          const double algbw = static_cast<double>(bytes) / t / 1e9;
          const double busbw = algbw * 2.0 * (ranks - 1) / ranks;
          std::printf("%12zu %12zu %8s %6s %6d %10.1f %9.2f %9.2f %7zu\n", bytes, count, "float", "sum", -1, t * 1e6,
                      algbw, busbw, total_wrong);
          std::fflush(stdout);
          failures += total_wrong != 0;
        }
      }
    });
  } catch (const mx::error& e) {
    std::fprintf(stderr, "quickstart: %s\n", e.what());
    return 1;
  }
  std::printf("# %s\n", failures ? "WRONG RESULTS" : "all results exact");
  return failures ? 1 : 0;
}
