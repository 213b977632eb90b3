// Building one rank's schedule at scale (schedule/schedule.hpp): rank 17's ring allreduce
// of 2^20 floats, default policy, at 64 .. 4096 ranks — time and the bytes it holds.
//
// `bytes` is schedule::memory_bytes(): every array's capacity (steps, deps, successors).
// One line first times the process's first build at 4096 ranks, page faults included,
// the figure a job pays once per tensor size. The goal is 1 MiB and 10 ms at 4096.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <cstdio>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/topology/ring.hpp"

namespace {

namespace schedule = mimatrix::schedule;

constexpr int rank = 17;
constexpr std::size_t count = std::size_t(1) << 20;  // one chunk a block at 4096 ranks

schedule::schedule build(int ranks) {
  const schedule::descriptor d{schedule::collective::allreduce, ranks, count, sizeof(float), 0};
  return mimatrix::algorithm::ring{}.build(mimatrix::topology::ring{}, d, rank);
}

void ring_allreduce_schedule(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  std::size_t steps = 0, bytes = 0;
  for (auto _ : state) {
    auto s = build(ranks);
    steps = s.steps.size();
    bytes = s.memory_bytes();
    benchmark::DoNotOptimize(s.steps.data());
  }
  state.counters["steps"] = double(steps);
  state.counters["bytes"] = double(bytes);
  state.counters["bytes_per_step"] = double(bytes) / double(steps);
}

void first_build() {
  const auto t0 = std::chrono::steady_clock::now();
  const auto s = build(4096);
  const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - t0;
  std::printf("first build, 4096 ranks, rank %d: %zu steps of %zu bytes, %zu deps, %zu bytes (%.3f MiB), %.3f ms\n",
              rank, s.steps.size(), sizeof(schedule::step), s.dep_ids.size(), s.memory_bytes(),
              double(s.memory_bytes()) / double(1 << 20), took.count());
}

}  // namespace

BENCHMARK(ring_allreduce_schedule)->RangeMultiplier(8)->Range(64, 4096)->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  first_build();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
