// Every algorithm and collective across real processes over libfabric's shm and
// tcp;ofi_rxm providers on loopback, world sizes 2 to 5, exact checks on integer-valued
// data up to 16 MiB (up to 1000 elements in the sanitizer builds' quick mode).
#include "mimatrix/transport/fabric.hpp"
#include "mimatrix/transport/fabric.hpp"  // and twice: the header is self-contained

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "mimatrix/algorithm/automatic.hpp"
#include "mimatrix/algorithm/gdraa.hpp"
#include "mimatrix/algorithm/halving_doubling.hpp"
#include "mimatrix/algorithm/hdrm.hpp"
#include "mimatrix/algorithm/hierarchical.hpp"
#include "mimatrix/algorithm/recursive_doubling.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "collective_checker.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;

MIMATRIX_SCENARIO(every_algorithm) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(60));
  test::checker c{comm, ""};
  [[maybe_unused]] const int p = comm.size();
  c.run_all<true>("ring", topology::ring{}, algorithm::ring{});  // every dtype: messages, bulk rings
  // 16 MiB (many chunks a step) where the transfers differ: ring's messages and bulk rings,
  // GDRAA's RMA writes, the hierarchical groups; halving-doubling's is in bulk_rings_test.
  // The others move the same chunked messages, fewer at a time (a third of this test's time).
#ifndef MIMATRIX_TEST_SANITIZER_SUBSET  // under a sanitizer: one algorithm a path, ring and GDRAA
  c.run_all("recursive_doubling", topology::ring{}, algorithm::recursive_doubling{}, false);
  c.run_all("halving_doubling", topology::ring{}, algorithm::halving_doubling{}, false);
  c.run_all("hdrm on bigraph", topology::bigraph{}, algorithm::hdrm{}, false);
#endif
  c.run_all<true>("gdraa on mesh", topology::mesh{}, algorithm::gdraa{});  // every dtype: one-sided
#ifndef MIMATRIX_TEST_SANITIZER_SUBSET
  using nodes = topology::hierarchical<topology::ring, topology::ring>;
  c.run_all("hierarchical", nodes(p % 2 ? 1 : 2), algorithm::default_for<nodes>{});
  c.run_all("automatic", topology::ring{}, algorithm::automatic{}, false);
#endif
  if (c.failures == 0) std::printf("rank %d: every algorithm exact over %s\n", comm.rank(), comm.transport().provider().c_str());
  return c.failures == 0 ? 0 : 1;
}

class every_algorithm : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(every_algorithm, is_exact_on_every_rank) {
  const auto& [provider, ranks] = GetParam();
  const auto result = test::run_ranks(ranks, provider, "every_algorithm");
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int r = 0; r < ranks; ++r)
    EXPECT_NE(result.output[std::size_t(r)].find("every algorithm exact over " + provider), std::string::npos)
        << test::all_output(result);
}

INSTANTIATE_TEST_SUITE_P(fabric, every_algorithm,
                         ::testing::Combine(::testing::ValuesIn(test::test_providers()), ::testing::Values(2, 3, 4, 5)),
                         test::provider_and_ranks_name);

}  // namespace
}  // namespace mimatrix
