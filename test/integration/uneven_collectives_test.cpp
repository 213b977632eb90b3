// The v-forms (allgatherv, reduce_scatter_v, gatherv, scatterv, alltoallv) through the
// runtime-typed entry across real processes over libfabric's shm and tcp;ofi_rxm on
// loopback, 2, 3 and 5 ranks: exact on integer data, every root, blocks of no elements
// among the others, blocks apart in the buffer, and blocks large enough for shm's bulk
// rings.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "collective_checker.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;
using counts = std::vector<std::size_t>;

/// Elements rank i gives rank j at scale n: some blocks empty, the others all different.
std::size_t block_count(int i, int j, std::size_t n) {
  if (n == 0 || (i * 7 + j * 3 + int(n % 5)) % 5 == 0) return 0;
  return n + std::size_t(i) + 2 * std::size_t(j);
}

/// Where block j starts with a gap of one element after each block.
counts spaced(const counts& c) {
  counts d(c.size());
  std::size_t at = 0;
  for (std::size_t j = 0; j < c.size(); ++j) {
    d[j] = at;
    at += c[j] + 1;
  }
  return d;
}
std::size_t extent(const counts& c, const counts& d) { return c.empty() ? 0 : d.back() + c.back(); }

struct uneven_checker {
  collectives<fabric>& coll;
  test::checker& c;
  int p, r;

  /// Rank i's element k of block j, exact in every type used here.
  static std::int32_t value(int i, std::size_t j, std::size_t k) {
    return std::int32_t(i * 1000003 + int(j) * 10007 + int(k % 9973));
  }

  void allgatherv(std::size_t n) {
    counts cs(static_cast<std::size_t>(p));  // rank j gives block_count(j, 0)
    for (int j = 0; j < p; ++j) cs[std::size_t(j)] = block_count(j, 0, n);
    const counts ds = spaced(cs);
    std::vector<std::int32_t> in(cs[std::size_t(r)]), out(extent(cs, ds));
    for (std::size_t k = 0; k < in.size(); ++k) in[k] = value(r, 0, k);
    coll.allgatherv(in.data(), in.size(), out.data(), cs, ds, dtype::int32).wait();
    for (int j = 0; j < p; ++j) {
      std::vector<std::int32_t> got(out.begin() + std::ptrdiff_t(ds[std::size_t(j)]),
                                    out.begin() + std::ptrdiff_t(ds[std::size_t(j)] + cs[std::size_t(j)]));
      c.expect(got, 0, "allgatherv n " + std::to_string(n) + " block " + std::to_string(j),
               [&](std::size_t k) { return value(j, 0, k); });
    }
  }

  void reduce_scatter_v(std::size_t n) {
    counts cs(static_cast<std::size_t>(p));
    for (int j = 0; j < p; ++j) cs[std::size_t(j)] = block_count(0, j, n);
    const std::size_t total = std::accumulate(cs.begin(), cs.end(), std::size_t(0));
    std::size_t mine = 0;
    for (int j = 0; j < r; ++j) mine += cs[std::size_t(j)];
    std::vector<std::int64_t> in(total), out(cs[std::size_t(r)]);
    for (std::size_t k = 0; k < total; ++k) in[k] = value(r, 0, k);
    coll.reduce_scatter_v(in.data(), out.data(), cs, dtype::int64, reduce::op_kind::sum).wait();
    c.expect(out, mine, "reduce_scatter_v n " + std::to_string(n), [&](std::size_t k) {
      std::int64_t s = 0;
      for (int j = 0; j < p; ++j) s += value(j, 0, k);
      return s;
    });
  }

  void gatherv_scatterv(std::size_t n, int root) {
    counts cs(static_cast<std::size_t>(p));
    for (int j = 0; j < p; ++j) cs[std::size_t(j)] = block_count(j, root, n);
    const counts ds = spaced(cs);
    const bool at_root = r == root;
    std::vector<float> in(cs[std::size_t(r)]), gathered(at_root ? extent(cs, ds) : 0);
    for (std::size_t k = 0; k < in.size(); ++k) in[k] = float(value(r, 0, k) % 65536);
    coll.gatherv(in.data(), in.size(), gathered.data(), at_root ? cs : counts{}, at_root ? ds : counts{},
                 dtype::float32, root)
        .wait();
    const std::string at = " n " + std::to_string(n) + " root " + std::to_string(root);
    if (at_root)
      for (int j = 0; j < p; ++j) {
        std::vector<float> got(gathered.begin() + std::ptrdiff_t(ds[std::size_t(j)]),
                               gathered.begin() + std::ptrdiff_t(ds[std::size_t(j)] + cs[std::size_t(j)]));
        c.expect(got, 0, "gatherv" + at + " block " + std::to_string(j),
                 [&](std::size_t k) { return float(value(j, 0, k) % 65536); });
      }
    // Scatterv sends the gathered blocks back, each to its rank.
    std::vector<float> back(cs[std::size_t(r)]);
    coll.scatterv(gathered.data(), at_root ? cs : counts{}, at_root ? ds : counts{}, back.data(), back.size(),
                  dtype::float32, root)
        .wait();
    c.expect(back, 0, "scatterv" + at, [&](std::size_t k) { return float(value(r, 0, k) % 65536); });
  }

  void alltoallv(std::size_t n) {
    counts sc(static_cast<std::size_t>(p)), rc(static_cast<std::size_t>(p));
    for (int j = 0; j < p; ++j) {
      sc[std::size_t(j)] = block_count(r, j, n);
      rc[std::size_t(j)] = block_count(j, r, n);
    }
    // Sends back to back (c10d's split sizes), receives apart.
    const counts rd = spaced(rc);
    std::vector<std::int32_t> in(std::accumulate(sc.begin(), sc.end(), std::size_t(0))), out(extent(rc, rd));
    for (std::size_t j = 0, at = 0; j < std::size_t(p); at += sc[j], ++j)
      for (std::size_t k = 0; k < sc[j]; ++k) in[at + k] = value(r, j, k);
    coll.alltoallv(in.data(), sc, {}, out.data(), rc, rd, dtype::int32).wait();
    for (int j = 0; j < p; ++j) {
      std::vector<std::int32_t> got(out.begin() + std::ptrdiff_t(rd[std::size_t(j)]),
                                    out.begin() + std::ptrdiff_t(rd[std::size_t(j)] + rc[std::size_t(j)]));
      c.expect(got, 0, "alltoallv n " + std::to_string(n) + " from " + std::to_string(j),
               [&](std::size_t k) { return value(j, std::size_t(r), k); });
    }
  }
};

MIMATRIX_SCENARIO(uneven_collectives) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(20));
  collectives<fabric> coll(comm);
  test::checker c{comm, "runtime entry"};
  const int p = comm.size();
  uneven_checker k{coll, c, p, comm.rank()};
  // 300,000 int32 elements: 1.2 MB blocks, which shm moves through its bulk rings.
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(1000), std::size_t(300000)}) {
    k.allgatherv(n);
    k.reduce_scatter_v(n);
    for (int root = 0; root < p; ++root) k.gatherv_scatterv(n, root);
    k.alltoallv(n);
  }
  if (c.failures == 0)
    std::printf("rank %d: v-forms exact over %s\n", comm.rank(), comm.transport().provider().c_str());
  return c.failures == 0 ? 0 : 1;
}

class uneven_collectives : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(uneven_collectives, are_exact_on_every_rank) {
  const auto& [provider, ranks] = GetParam();
  const auto result = test::run_ranks(ranks, provider, "uneven_collectives");
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int r = 0; r < ranks; ++r)
    EXPECT_NE(result.output[std::size_t(r)].find("v-forms exact over " + provider), std::string::npos)
        << test::all_output(result);
}

INSTANTIATE_TEST_SUITE_P(fabric, uneven_collectives,
                         ::testing::Combine(::testing::ValuesIn(test::test_providers()), ::testing::Values(2, 3, 5)),
                         test::provider_and_ranks_name);

}  // namespace
}  // namespace mimatrix
