// Reduce, gather, scatter and alltoall through the runtime-typed entry across real
// processes over libfabric's shm and tcp;ofi_rxm on loopback, 2, 3 and 5 ranks: every
// algorithm that runs each (named per call) and automatic's choice, every root, in place
// on the root, exact on integer-valued data from 0 elements to 4 MiB.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "collective_checker.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;

struct rooted_checker {
  collectives<fabric>& coll;
  test::checker& c;
  int p, r;

  call_options with(const char* algorithm) const {
    call_options o;
    o.algorithm = algorithm;
    return o;
  }

  void reduce(std::size_t n, int root, const char* algorithm) {
    std::vector<std::int32_t> in(n), out(r == root ? n : 0);
    for (std::size_t i = 0; i < n; ++i) in[i] = test::value<std::int32_t>(r, i);
    coll.reduce(in.data(), out.data(), n, dtype::int32, reduce::op_kind::sum, root, with(algorithm)).wait();
    const auto sum = [&](std::size_t i) {
      std::int32_t s = 0;
      for (int j = 0; j < p; ++j) s += test::value<std::int32_t>(j, i);
      return s;
    };
    const std::string what = std::string("reduce ") + algorithm + " root " + std::to_string(root);
    if (r == root) c.expect(out, 0, what, sum);
    // In place on the root; the others give their input again.
    coll.reduce(in.data(), in.data(), n, dtype::int32, reduce::op_kind::sum, root, with(algorithm)).wait();
    if (r == root) c.expect(in, 0, what + " in place", sum);
  }

  void gather(std::size_t n, int root, const char* algorithm) {
    std::vector<float> in(n), out(r == root ? p * n : 0);
    for (std::size_t i = 0; i < n; ++i) in[i] = test::value<float>(r, i);
    coll.gather(in.data(), out.data(), n, dtype::float32, root, with(algorithm)).wait();
    const auto block = [&](std::size_t i) { return test::value<float>(int(i / n), i % n); };
    if (r == root) c.expect(out, 0, std::string("gather ") + algorithm + " root " + std::to_string(root), block);
  }

  void scatter(std::size_t n, int root, const char* algorithm) {
    std::vector<std::int64_t> in(r == root ? p * n : 0), out(n);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = test::value<std::int64_t>(root, i);
    coll.scatter(in.data(), out.data(), n, dtype::int64, root, with(algorithm)).wait();
    c.expect(out, std::size_t(r) * n, std::string("scatter ") + algorithm + " root " + std::to_string(root),
             [&](std::size_t i) { return test::value<std::int64_t>(root, i); });
  }

  void alltoall(std::size_t n, const char* algorithm) {
    std::vector<std::int32_t> in(p * n), out(p * n);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = test::value<std::int32_t>(r, i);
    coll.alltoall(in.data(), out.data(), n, dtype::int32, with(algorithm)).wait();
    // Block j of this rank's output is block r of rank j's input.
    c.expect(out, 0, std::string("alltoall ") + algorithm, [&](std::size_t i) {
      return test::value<std::int32_t>(int(i / n), std::size_t(r) * n + i % n);
    });
  }
};

MIMATRIX_SCENARIO(rooted_collectives) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(20));
  collectives<fabric> coll(comm);
  test::checker c{comm, "runtime entry"};
  const int p = comm.size();
  rooted_checker k{coll, c, p, comm.rank()};
  const std::vector<std::size_t> counts = {0, 1, 1000, test::quick ? 4096 : (std::size_t(1) << 20)};
  for (std::size_t n : counts) {
    for (int root = 0; root < p; ++root) {
      for (const char* a : {"binomial", "linear", "rabenseifner", ""}) k.reduce(n, root, a);
      for (const char* a : {"binomial", "linear", ""}) {
        k.gather(n, root, a);
        k.scatter(n, root, a);
      }
    }
    for (const char* a : {"pairwise", "bruck", ""}) k.alltoall(n, a);
  }
  if (c.failures == 0)
    std::printf("rank %d: rooted collectives exact over %s\n", comm.rank(), comm.transport().provider().c_str());
  return c.failures == 0 ? 0 : 1;
}

class rooted_collectives : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(rooted_collectives, are_exact_on_every_rank) {
  const auto& [provider, ranks] = GetParam();
  const auto result = test::run_ranks(ranks, provider, "rooted_collectives");
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int r = 0; r < ranks; ++r)
    EXPECT_NE(result.output[std::size_t(r)].find("rooted collectives exact over " + provider), std::string::npos)
        << test::all_output(result);
}

INSTANTIATE_TEST_SUITE_P(fabric, rooted_collectives,
                         ::testing::Combine(::testing::ValuesIn(test::test_providers()), ::testing::Values(2, 3, 5)),
                         test::provider_and_ranks_name);

}  // namespace
}  // namespace mimatrix
