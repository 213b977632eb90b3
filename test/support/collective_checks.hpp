// The numeric checks of the collective grid, for any topology and algorithm: run a
// collective on p in-process ranks, out of place and in place, and compare every
// element of every rank with the reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "mimatrix/allgather.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/broadcast.hpp"
#include "mimatrix/reduce_scatter.hpp"
#include "mimatrix/transport/inproc.hpp"
#include "support/dtypes.hpp"
#include "support/grid.hpp"

namespace mimatrix::test {

using transport::inproc;

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

/// Allreduce: every rank within tolerance of the reference, all ranks bit-identical,
/// in place bit-identical to out of place.
template <class Op, class Topology, class Algorithm>
void check_allreduce(int p, std::size_t n, std::uint64_t seed, const Topology& topo, const Algorithm& algo) {
  using T = typename Op::value_type;
  std::vector<std::vector<T>> in(p), out(p, std::vector<T>(n)), in_place(p);
  for (int r = 0; r < p; ++r) in[r] = random_values<Op>(n, seed + r);
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    allreduce<inproc, Topology, Op, Algorithm> reduce(comm, topo, algo);
    reduce(in[r], out[r]);
    in_place[r] = in[r];
    reduce(in_place[r]);
  });
  const reference ref = reduce_reference<Op>(in);
  constexpr auto npos = static_cast<std::size_t>(-1);
  for (int r = 0; r < p; ++r) {
    std::size_t at = first_miss(out[r], ref);
    for (std::size_t e = 0; at == npos && e < n; ++e)
      if (std::memcmp(&out[r][e], &out[0][e], sizeof(T)) || std::memcmp(&in_place[r][e], &out[r][e], sizeof(T))) at = e;
    if (at != npos)
      FAIL() << Algorithm::name << " allreduce " << reduce::to_string(Op::kind) << "<" << to_string(dtype_of<T>)
             << "> p=" << p << " count=" << n << " seed=" << seed << ": rank " << r << " element " << at << " is "
             << to_double(out[r][at]) << " (in place " << to_double(in_place[r][at]) << ", rank 0 "
             << to_double(out[0][at]) << "), expected " << ref.value[at] << " ± "
             << (ref.tolerance.empty() ? 0.0 : ref.tolerance[at]);
  }
}

/// Reduce-scatter: rank r gets block r of the reduction, in place (block r of its
/// input) bit-identical to out of place.
template <class Op, class Topology, class Algorithm>
void check_reduce_scatter(int p, std::size_t n, std::uint64_t seed, const Topology& topo, const Algorithm& algo) {
  using T = typename Op::value_type;
  std::vector<std::vector<T>> in(p), out(p, std::vector<T>(n)), in_place(p);
  for (int r = 0; r < p; ++r) in[r] = random_values<Op>(p * n, seed + r);
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    reduce_scatter<inproc, Topology, Op, Algorithm> scatter(comm, topo, algo);
    scatter(in[r], out[r]);
    in_place[r] = in[r];
    scatter(in_place[r]);
  });
  const reference ref = reduce_reference<Op>(in);
  for (int r = 0; r < p; ++r) {
    const std::size_t e = first_miss(out[r], ref, r * n);
    const std::vector<T> block(in_place[r].begin() + static_cast<std::ptrdiff_t>(r * n),
                               in_place[r].begin() + static_cast<std::ptrdiff_t>((r + 1) * n));
    if (e != static_cast<std::size_t>(-1) || !same_bits(block, out[r])) {
      const std::size_t at = e != static_cast<std::size_t>(-1) ? e : 0;
      FAIL() << Algorithm::name << " reduce_scatter " << reduce::to_string(Op::kind) << "<"
             << to_string(dtype_of<T>) << "> p=" << p << " count=" << n << " seed=" << seed << ": rank " << r
             << " element " << at << " is " << to_double(out[r][at]) << " (in place " << to_double(block[at])
             << "), expected " << ref.value[r * n + at];
    }
  }
}

/// Allgather: block j of every rank's output is rank j's input, bit for bit.
template <class T, class Topology, class Algorithm>
void check_allgather(int p, std::size_t n, std::uint64_t seed, const Topology& topo, const Algorithm& algo) {
  std::vector<std::vector<T>> in(p), out(p, std::vector<T>(p * n)), in_place(p, std::vector<T>(p * n));
  for (int r = 0; r < p; ++r) in[r] = random_values<reduce::sum<T>>(n, seed + r);
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    allgather<inproc, Topology, T, Algorithm> gather(comm, topo, algo);
    gather(in[r], out[r]);
    std::copy(in[r].begin(), in[r].end(), in_place[r].begin() + static_cast<std::ptrdiff_t>(r * n));
    gather(in_place[r]);
  });
  std::vector<T> expected;
  for (int j = 0; j < p; ++j) expected.insert(expected.end(), in[j].begin(), in[j].end());
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(same_bits(out[r], expected))
        << Algorithm::name << " allgather " << to_string(dtype_of<T>) << " p=" << p << " count=" << n << " rank " << r;
    ASSERT_TRUE(same_bits(in_place[r], expected)) << Algorithm::name << " allgather in place, "
                                                  << to_string(dtype_of<T>) << " p=" << p << " count=" << n
                                                  << " rank " << r;
  }
}

/// Broadcast: every rank ends with the root's buffer; other ranks pass no input.
template <class T, class Topology, class Algorithm>
void check_broadcast(int p, std::size_t n, int root, std::uint64_t seed, const Topology& topo,
                     const Algorithm& algo) {
  const std::vector<T> data = random_values<reduce::sum<T>>(n, seed);
  std::vector<std::vector<T>> out(p, std::vector<T>(n)), in_place(p, std::vector<T>(n));
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    broadcast<inproc, Topology, T, Algorithm> bcast(comm, topo, algo);
    bcast(r == root ? std::span<const T>(data) : std::span<const T>(), out[r], root);
    if (r == root) in_place[r] = data;
    bcast(in_place[r], root);
  });
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(same_bits(out[r], data)) << Algorithm::name << " broadcast " << to_string(dtype_of<T>) << " p=" << p
                                         << " count=" << n << " root " << root << " rank " << r;
    ASSERT_TRUE(same_bits(in_place[r], data)) << Algorithm::name << " broadcast in place, p=" << p << " count=" << n
                                              << " root " << root << " rank " << r;
  }
}

/// The node size a hierarchical grid uses for a group of p: nodes of 2 for even groups,
/// of 3 for odd multiples of 3; other odd groups alternate between one node of all ranks
/// and one rank a node, so both degenerate shapes run.
inline int hierarchical_node_size(int p) {
  if (p % 2 == 0) return 2;
  if (p % 3 == 0) return 3;
  return p % 4 == 1 ? p : 1;
}

/// How far a grid goes: `full` adds the largest count (2^20 elements in all), which
/// dominates the run time; other algorithms than the ring run `standard`.
enum class extent { standard, full };

/// The grid's row for one (p, dtype): every count, every operation.
template <class Topology, class Algorithm>
void allreduce_grid(int p, dtype type, const Topology& topo, const Algorithm& algo, extent how = extent::standard) {
  with_dtype(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (std::size_t n : grid_counts(p, how == extent::full ? std::size_t(1) << 20 : 0)) {
      SCOPED_TRACE("count " + std::to_string(n));
      const std::uint64_t seed = run_seed() + n;
      check_allreduce<reduce::sum<T>>(p, n, seed, topo, algo);
      check_allreduce<reduce::prod<T>>(p, n, seed + 1000, topo, algo);
      check_allreduce<reduce::min<T>>(p, n, seed + 2000, topo, algo);
      check_allreduce<reduce::max<T>>(p, n, seed + 3000, topo, algo);
      check_allreduce<reduce::avg<T>>(p, n, seed + 4000, topo, algo);
      if (::testing::Test::HasFatalFailure()) return;
    }
  });
}

template <class Topology, class Algorithm>
void reduce_scatter_grid(int p, dtype type, const Topology& topo, const Algorithm& algo,
                         extent how = extent::standard) {
  with_dtype(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (std::size_t n : grid_counts(p, how == extent::full ? (std::size_t(1) << 20) / p : 0)) {
      SCOPED_TRACE("count " + std::to_string(n));
      const std::uint64_t seed = run_seed() + n;
      check_reduce_scatter<reduce::sum<T>>(p, n, seed, topo, algo);
      check_reduce_scatter<reduce::prod<T>>(p, n, seed + 1, topo, algo);
      check_reduce_scatter<reduce::min<T>>(p, n, seed + 2, topo, algo);
      check_reduce_scatter<reduce::max<T>>(p, n, seed + 3, topo, algo);
      check_reduce_scatter<reduce::avg<T>>(p, n, seed + 4, topo, algo);
      if (::testing::Test::HasFatalFailure()) return;
    }
  });
}

template <class Topology, class Algorithm>
void allgather_grid(int p, dtype type, const Topology& topo, const Algorithm& algo, extent how = extent::standard) {
  with_dtype(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (std::size_t n : grid_counts(p, how == extent::full ? (std::size_t(1) << 20) / p : 0)) {
      SCOPED_TRACE("count " + std::to_string(n));
      check_allgather<T>(p, n, run_seed() + n, topo, algo);
      if (::testing::Test::HasFatalFailure()) return;
    }
  });
}

template <class Topology, class Algorithm>
void broadcast_grid(int p, dtype type, const Topology& topo, const Algorithm& algo, extent how = extent::standard) {
  with_dtype(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (std::size_t n : grid_counts(p, how == extent::full ? std::size_t(1) << 20 : 0)) {
      SCOPED_TRACE("count " + std::to_string(n));
      for (int root : {0, p - 1, p / 2}) check_broadcast<T>(p, n, root, run_seed() + n + root, topo, algo);
      if (::testing::Test::HasFatalFailure()) return;
    }
  });
}

/// gtest parameters (p, dtype) and their test names, "p3_float".
using grid_param = std::tuple<int, dtype>;
inline auto grid_params(grid_extent extent = grid_extent::every_size) {
  return ::testing::Combine(::testing::ValuesIn(grid_world_sizes(extent)), ::testing::ValuesIn(all_dtypes));
}
inline std::string grid_param_name(const ::testing::TestParamInfo<grid_param>& info) {
  return grid_name(std::get<0>(info.param), std::get<1>(info.param));
}

}  // namespace mimatrix::test
