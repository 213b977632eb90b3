// The flight record's cost a call (detail/flight_record.hpp): one start and one end on
// the ring, as every call pays with MIMATRIX_FLIGHT_RECORD on, and a snapshot as a dump
// takes it. Compare a call's start and end with allreduce_perf's 8 B time over shm
// (about 450 ns on this project's CI machine class): 2% of it is 9 ns.
#include <benchmark/benchmark.h>

#include <cstdint>

#include "mimatrix/detail/flight_record.hpp"

namespace {

using mimatrix::detail::flight_record;
using mimatrix::detail::flight_start;

void start_and_end(benchmark::State& state) {
  flight_record record(std::size_t(state.range(0)));
  flight_start call;
  mimatrix::detail::copy_cut(call.algorithm, "ring");
  std::uint64_t sequence = 0;
  for (auto _ : state) {
    call.sequence = sequence;
    benchmark::DoNotOptimize(record.start(call));
    record.finish(sequence++, {}, {});
  }
}
BENCHMARK(start_and_end)->Arg(1)->Arg(2000);

void snapshot(benchmark::State& state) {
  flight_record record(2000);
  flight_start call;
  for (std::uint64_t s = 0; s < 2048; ++s) {
    call.sequence = s;
    (void)record.start(call);
  }
  for (auto _ : state) benchmark::DoNotOptimize(record.snapshot());
}
BENCHMARK(snapshot);

}  // namespace

BENCHMARK_MAIN();
