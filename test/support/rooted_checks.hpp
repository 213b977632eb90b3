// The numeric checks of reduce, gather, scatter and alltoall for any topology and
// algorithm: run the call on p in-process ranks, out of place and in place (alltoall:
// out of place only), and compare every element of every rank with the reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <vector>

#include "mimatrix/alltoall.hpp"
#include "mimatrix/gather.hpp"
#include "mimatrix/reduce_to_root.hpp"
#include "mimatrix/transport/inproc.hpp"
#include "support/collective_checks.hpp"
#include "support/grid.hpp"

namespace mimatrix::test {

/// Reduce: the root's output within tolerance of the reference, in place bit-identical
/// to out of place; no other rank's output is written.
template <class Op, class Topology, class Algorithm>
void check_reduce(int p, std::size_t n, int root, std::uint64_t seed, const Topology& topo, const Algorithm& algo) {
  using T = typename Op::value_type;
  std::vector<std::vector<T>> in(p), out(p, std::vector<T>(n)), in_place(p);
  for (int r = 0; r < p; ++r) in[r] = random_values<Op>(n, seed + r);
  const std::vector<T> untouched = out[0];
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    reduce_to_root<inproc, Topology, Op, Algorithm> reduce(comm, topo, algo);
    reduce(in[r], out[r], root);
    in_place[r] = in[r];
    reduce(in_place[r], in_place[r], root);
  });
  const reference ref = reduce_reference<Op>(in);
  const std::size_t at = first_miss(out[root], ref);
  if (at != static_cast<std::size_t>(-1) || !same_bits(out[root], in_place[root]))
    FAIL() << Algorithm::name << " reduce " << reduce::to_string(Op::kind) << "<" << to_string(dtype_of<T>)
           << "> p=" << p << " count=" << n << " root " << root << " seed=" << seed << ": element "
           << (at == static_cast<std::size_t>(-1) ? 0 : at) << " differs from the reference or in place";
  for (int r = 0; r < p; ++r) {
    if (r != root) {
      ASSERT_TRUE(same_bits(out[r], untouched)) << "reduce wrote rank " << r << "'s output";
    }
  }
}

/// Gather: block j of the root's output is rank j's input, bit for bit, in place too.
template <class T, class Topology, class Algorithm>
void check_gather(int p, std::size_t n, int root, std::uint64_t seed, const Topology& topo, const Algorithm& algo) {
  std::vector<std::vector<T>> in(p), out(p), in_place(p);
  for (int r = 0; r < p; ++r) in[r] = random_values<reduce::sum<T>>(n, seed + r);
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    gather<inproc, Topology, T, Algorithm> g(comm, topo, algo);
    if (r == root) out[r].resize(p * n);
    g(in[r], out[r], root);
    in_place[r] = r == root ? std::vector<T>(p * n) : in[r];
    if (r == root) std::copy(in[r].begin(), in[r].end(), in_place[r].begin() + std::ptrdiff_t(r * n));
    g.start(std::span<T>(in_place[r]), root).wait();
  });
  std::vector<T> expected;
  for (int j = 0; j < p; ++j) expected.insert(expected.end(), in[j].begin(), in[j].end());
  ASSERT_TRUE(same_bits(out[root], expected))
      << Algorithm::name << " gather " << to_string(dtype_of<T>) << " p=" << p << " count=" << n << " root " << root;
  ASSERT_TRUE(same_bits(in_place[root], expected))
      << Algorithm::name << " gather in place " << to_string(dtype_of<T>) << " p=" << p << " count=" << n << " root "
      << root;
}

/// Scatter: rank j's output is block j of the root's input, bit for bit, in place too.
template <class T, class Topology, class Algorithm>
void check_scatter(int p, std::size_t n, int root, std::uint64_t seed, const Topology& topo, const Algorithm& algo) {
  const std::vector<T> data = random_values<reduce::sum<T>>(p * n, seed);
  std::vector<std::vector<T>> out(p, std::vector<T>(n)), in_place(p);
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    scatter<inproc, Topology, T, Algorithm> s(comm, topo, algo);
    s(r == root ? std::span<const T>(data) : std::span<const T>(), out[r], root);
    in_place[r] = r == root ? data : std::vector<T>(n);
    s.start(std::span<T>(in_place[r]), root).wait();
  });
  for (int r = 0; r < p; ++r) {
    const std::vector<T> block(data.begin() + std::ptrdiff_t(r * n), data.begin() + std::ptrdiff_t((r + 1) * n));
    ASSERT_TRUE(same_bits(out[r], block)) << Algorithm::name << " scatter " << to_string(dtype_of<T>) << " p=" << p
                                          << " count=" << n << " root " << root << " rank " << r;
    const std::vector<T> kept = r == root ? std::vector<T>(in_place[r].begin() + std::ptrdiff_t(r * n),
                                                           in_place[r].begin() + std::ptrdiff_t((r + 1) * n))
                                          : in_place[r];
    ASSERT_TRUE(same_bits(kept, block)) << Algorithm::name << " scatter in place, p=" << p << " count=" << n
                                        << " root " << root << " rank " << r;
  }
}

/// Alltoall: block j of rank r's output is block r of rank j's input, bit for bit.
template <class T, class Topology, class Algorithm>
void check_alltoall(int p, std::size_t n, std::uint64_t seed, const Topology& topo, const Algorithm& algo) {
  std::vector<std::vector<T>> in(p), out(p, std::vector<T>(p * n));
  for (int r = 0; r < p; ++r) in[r] = random_values<reduce::sum<T>>(p * n, seed + r);
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    alltoall<inproc, Topology, T, Algorithm> a(comm, topo, algo);
    a(in[r], out[r]);
  });
  for (int r = 0; r < p; ++r)
    for (int j = 0; j < p; ++j)
      ASSERT_TRUE(std::equal(out[r].begin() + std::ptrdiff_t(j * n), out[r].begin() + std::ptrdiff_t((j + 1) * n),
                             in[j].begin() + std::ptrdiff_t(r * n),
                             [](const T& a, const T& b) { return std::memcmp(&a, &b, sizeof(T)) == 0; }))
          << Algorithm::name << " alltoall " << to_string(dtype_of<T>) << " p=" << p << " count=" << n << " rank "
          << r << " block " << j;
}

}  // namespace mimatrix::test
