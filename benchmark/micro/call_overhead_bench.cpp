// What the engine costs a call, without a network: an 8 B allreduce on one in-process rank
// through the runtime-typed entry, fresh and (where the build has them) persistent. The
// difference is what persistent::start() skips: the argument checks, the plan lookup and
// the choice of plan. Built unchanged against an older commit, for benchmark/compare's
// --before question at the engine's own scale (nanoseconds, where shm's noise is 2x).
#include <benchmark/benchmark.h>

#include <cstdint>

#include "mimatrix/collectives.hpp"
#include "mimatrix/transport/inproc.hpp"

namespace {

using namespace mimatrix;
using transport::inproc;

struct one_rank {
  inproc::world world{1};
  communicator<inproc> comm{world, 0};
  collectives<inproc> coll{comm};
  std::int64_t in = 1, out = 0;
};

void fresh_allreduce_8_bytes(benchmark::State& state) {
  one_rank r;
  for (auto _ : state) r.coll.allreduce(&r.in, &r.out, 1, dtype::int64, reduce::op_kind::sum).wait();
  benchmark::DoNotOptimize(r.out);
}
BENCHMARK(fresh_allreduce_8_bytes);

#if __has_include("mimatrix/persistent.hpp")
void persistent_allreduce_8_bytes(benchmark::State& state) {
  one_rank r;
  persistent call = r.coll.allreduce_init(&r.in, &r.out, 1, dtype::int64, reduce::op_kind::sum);
  for (auto _ : state) call.start().wait();
  benchmark::DoNotOptimize(r.out);
}
BENCHMARK(persistent_allreduce_8_bytes);
#endif

}  // namespace

BENCHMARK_MAIN();
