// Exact checks of every collective across processes, shared by the multi-process tests:
// integer-valued data whose sums are exact in every dtype, and a checker that runs the
// collectives of one algorithm and reports the first wrong element of each.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "mimatrix/allgather.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/broadcast.hpp"
#include "mimatrix/reduce_scatter.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "support/grid.hpp"

namespace mimatrix::test {

using transport::fabric;

/// Rank r's element i: small integers, so sums are exact in every type (int8 included).
template <class T>
T value(int r, std::size_t i) {
  return T(static_cast<int>((i * 31 + std::size_t(r) * 17) % 23) + 1);
}

struct checker {
  communicator<fabric>& comm;
  std::string where;  // algorithm and topology
  int failures = 0;

  template <class T>
  void expect(const std::vector<T>& got, std::size_t offset, const std::string& what, auto&& want) {
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (test::to_double(got[i]) == test::to_double(want(offset + i))) continue;
      std::fprintf(stderr, "rank %d: %s %s: element %zu is %g, expected %g\n", comm.rank(), where.c_str(),
                   what.c_str(), i, test::to_double(got[i]), test::to_double(want(offset + i)));
      ++failures;
      return;
    }
  }

  template <class Op, class Topology, class Algorithm>
  void allreduce_of(std::size_t n, const Topology& topo, const Algorithm& algo) {
    using T = typename Op::value_type;
    const int p = comm.size();
    allreduce<fabric, Topology, Op, Algorithm> run(comm, topo, algo);
    std::vector<T> in(n), out(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = value<T>(comm.rank(), i);
    auto want = [&](std::size_t i) {  // small integers: exact in double, then in T
      double acc = test::to_double(value<T>(0, i));
      for (int r = 1; r < p; ++r) {
        const double v = test::to_double(value<T>(r, i));
        acc = Op::kind == reduce::op_kind::max ? std::max(acc, v) : Op::kind == reduce::op_kind::min ? std::min(acc, v)
                                                                                                  : acc + v;
      }
      if constexpr (std::is_integral_v<T>)
        return T(acc);
      else
        return T(float(acc));
    };
    const std::string what = "allreduce " + std::string(reduce::to_string(Op::kind)) + " " +
                             std::string(to_string(dtype_of<T>)) + " count " + std::to_string(n);
    run(in, out);
    expect(out, 0, what + " out of place", want);
    run(in);
    expect(in, 0, what + " in place", want);
  }

  /// Allreduce in every dtype, and max: what the wire and the combine kernels see of a
  /// dtype does not depend on the algorithm, so the quick tier runs it for the algorithms
  /// that take different paths (`EveryDtype`; not under sanitizers, where the kernels'
  /// own tests cover the dtypes), the long tier for all.
  template <class Topology, class Algorithm>
  void allreduce_every_dtype(std::size_t n, const Topology& topo, const Algorithm& algo) {
    allreduce_of<reduce::sum<std::int64_t>>(n, topo, algo);
    allreduce_of<reduce::sum<std::int8_t>>(n, topo, algo);
    allreduce_of<reduce::sum<std::uint8_t>>(n, topo, algo);
    allreduce_of<reduce::sum<float>>(n, topo, algo);
    allreduce_of<reduce::sum<double>>(n, topo, algo);
    allreduce_of<reduce::sum<half>>(n, topo, algo);
    allreduce_of<reduce::sum<bfloat16>>(n, topo, algo);
    allreduce_of<reduce::max<std::int32_t>>(n, topo, algo);
  }

  template <bool EveryDtype, class Topology, class Algorithm>
  void every_collective(std::size_t n, const Topology& topo, const Algorithm& algo) {
    const int p = comm.size(), me = comm.rank();
    allreduce_of<reduce::sum<std::int32_t>>(n, topo, algo);
    allreduce_of<reduce::min<float>>(n, topo, algo);
    if constexpr ((EveryDtype && !test::quick) || test::long_tier) allreduce_every_dtype(n, topo, algo);

    {  // reduce_scatter: rank r gets block r of the sum
      reduce_scatter<fabric, Topology, reduce::sum<std::int32_t>, Algorithm> run(comm, topo, algo);
      std::vector<std::int32_t> in(n * std::size_t(p)), out(n);
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = value<std::int32_t>(me, i);
      run(in, out);
      expect(out, n * std::size_t(me), "reduce_scatter sum int32 count " + std::to_string(n), [&](std::size_t i) {
        std::int32_t acc = 0;
        for (int r = 0; r < p; ++r) acc += value<std::int32_t>(r, i);
        return acc;
      });
    }
    {  // allgather: block j comes from rank j
      allgather<fabric, Topology, std::int64_t, Algorithm> run(comm, topo, algo);
      std::vector<std::int64_t> in(n), out(n * std::size_t(p));
      for (std::size_t i = 0; i < n; ++i) in[i] = value<std::int64_t>(me, i);
      run(in, out);
      expect(out, 0, "allgather int64 count " + std::to_string(n), [&](std::size_t i) {
        return n ? value<std::int64_t>(int(i / n), i % n) : 0;
      });
    }
    {  // broadcast from the last rank
      broadcast<fabric, Topology, std::uint8_t, Algorithm> run(comm, topo, algo);
      std::vector<std::uint8_t> data(n);
      for (std::size_t i = 0; i < n; ++i) data[i] = value<std::uint8_t>(me, i);
      run(data, p - 1);
      expect(data, 0, "broadcast uint8 root " + std::to_string(p - 1) + " count " + std::to_string(n),
             [&](std::size_t i) { return value<std::uint8_t>(p - 1, i); });
    }
  }

  /// Every collective of one algorithm, counts 0 to 65537, and with `large` a 16 MiB
  /// allreduce; with every_dtype, allreduce in every dtype too.
  template <bool EveryDtype = false, class Topology, class Algorithm>
  void run_all(const std::string& name, const Topology& topo, const Algorithm& algo, bool large = true) {
    where = name;
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(1000), std::size_t(65537)})
      if (!test::quick || n < 65537) every_collective<EveryDtype>(n, topo, algo);
    if (large && !test::quick) allreduce_of<reduce::sum<std::int32_t>>(std::size_t(4) << 20, topo, algo);  // 16 MiB
  }
};

}  // namespace mimatrix::test
