// Host reduction kernels (reduce/cpu.hpp) against memcpy, the streaming baseline, for message
// sizes 4 KiB .. 64 MiB; ends with one line a size: each kernel's bandwidth / memcpy's.
//
// Bytes counted are streaming bytes, read plus written, per buffer of `size` bytes:
//   memcpy(dst, src, size)          reads size, writes size        = 2 x size
//   combine(op, a, a, b, count)     reads a and b, writes a         = 3 x size
// combine runs in place (dst == a), as a receive-and-reduce step does.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "mimatrix/reduce/cpu.hpp"

namespace {

namespace reduce = mimatrix::reduce;
using mimatrix::bfloat16;
using mimatrix::half;

constexpr std::int64_t smallest_bytes = std::int64_t{4} << 10;  // 4 KiB: in L1
constexpr std::int64_t largest_bytes = std::int64_t{64} << 20;  // 64 MiB: past any L3 here
constexpr int size_step = 4;                                     // 4 KiB, 16 KiB, ... 64 MiB
constexpr double memcpy_streams = 2;                             // read src, write dst
constexpr double combine_streams = 3;                            // read a and b, write a
const char* const bytes_per_second = "bytes_per_second";

benchmark::Counter streaming_rate(double bytes_per_iteration) {
  return benchmark::Counter(bytes_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
                            benchmark::Counter::kIs1024);
}

void bench_memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<unsigned char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.counters[bytes_per_second] = streaming_rate(memcpy_streams * static_cast<double>(bytes));
}

template <class Op> void bench_combine(benchmark::State& state) {
  using T = typename Op::value_type;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / sizeof(T);
  // Small, normal values: no denormals (slow on some CPUs) whatever the iteration count.
  std::vector<T> a(count, mimatrix::narrow<T>(mimatrix::accumulator_t<T>(1)));
  std::vector<T> b(count, mimatrix::narrow<T>(mimatrix::accumulator_t<T>(0)));
  const Op op;
  for (auto _ : state) {
    reduce::cpu::combine(op, a.data(), a.data(), b.data(), count);
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.counters[bytes_per_second] = streaming_rate(combine_streams * static_cast<double>(bytes));
}

/// Console output as usual, and each run's bandwidth kept for the summary.
class summary_reporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    // One value a benchmark: the run itself, or with --benchmark_repetitions the median.
    for (const Run& run : runs) {
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      if (run.error_occurred || !(run.run_type == Run::RT_Iteration || median)) continue;
      const std::string& name = run.run_name.function_name;  // the kernel, e.g. "sum<float>"
      const auto it = run.counters.find(bytes_per_second);
      if (it == run.counters.end() || name.empty()) continue;
      const std::int64_t size = std::stoll(run.run_name.args);  // "<bytes>"
      if (median || !medians_.contains({size, name})) rates_[size][name] = it->second.value;
      if (median) medians_.insert({size, name});
    }
    ConsoleReporter::ReportRuns(runs);
  }

  /// "size 64 MiB: memcpy 10.2 GiB/s | sum<float> 0.91 | ..." for every size measured.
  void print_summary(const std::vector<std::string>& kernels) const {
    std::printf("\nstreaming bandwidth / memcpy's (bytes read + written: combine 3 x size, memcpy 2 x size)\n");
    for (const auto& [size, rate] : rates_) {
      const auto base = rate.find("memcpy");
      if (base == rate.end() || base->second <= 0) continue;
      std::printf("size %8lld KiB: memcpy %6.1f GiB/s", static_cast<long long>(size >> 10),
                  base->second / double(1 << 30));
      for (const std::string& k : kernels)
        if (const auto r = rate.find(k); r != rate.end()) std::printf(" | %s %.2f", k.c_str(), r->second / base->second);
      std::printf("\n");
    }
  }

 private:
  std::map<std::int64_t, std::map<std::string, double>> rates_;
  std::set<std::pair<std::int64_t, std::string>> medians_;
};

template <class Op> void add_combine(std::vector<std::string>& names, const char* name) {
  names.emplace_back(name);
  benchmark::RegisterBenchmark(name, bench_combine<Op>)->RangeMultiplier(size_step)->Range(smallest_bytes, largest_bytes);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RegisterBenchmark("memcpy", bench_memcpy)->RangeMultiplier(size_step)->Range(smallest_bytes, largest_bytes);
  std::vector<std::string> kernels;
  add_combine<reduce::sum<float>>(kernels, "sum<float>");
  add_combine<reduce::sum<double>>(kernels, "sum<double>");
  add_combine<reduce::sum<std::int32_t>>(kernels, "sum<int32>");
  add_combine<reduce::sum<bfloat16>>(kernels, "sum<bfloat16>");
  add_combine<reduce::sum<half>>(kernels, "sum<half>");
  add_combine<reduce::max<float>>(kernels, "max<float>");
  summary_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_summary(kernels);
  benchmark::Shutdown();
  return 0;
}
