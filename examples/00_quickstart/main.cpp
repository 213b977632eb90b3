// Quick start: a ring allreduce of float gradients across ranks that are threads of
// this process, checked element by element and timed in nccl-tests' columns.
//
//   quickstart [ranks=4] [max_bytes=64M]
#include <mimatrix/mimatrix.hpp>

#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace mx = mimatrix;
using mx::transport::inproc;
using ring_sum = mx::allreduce<inproc, mx::topology::ring, mx::reduce::sum<float>>;

namespace {

std::size_t parse_bytes(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<std::size_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 4;
  const std::size_t max_bytes = argc > 2 ? parse_bytes(argv[2]) : std::size_t(64) << 20;
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
