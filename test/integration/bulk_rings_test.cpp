// Chunks between ranks on one host through shared-memory rings (fabric_options::bulk):
// every collective stays exact with the rings on (the default over shm), off (the
// provider's copy), with tiny chunks that wrap and fill the rings all the time, and over
// tcp;ofi_rxm with the rings forced on.
#include "mimatrix/transport/fabric.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "collective_checker.hpp"
#include "mimatrix/algorithm/automatic.hpp"
#include "mimatrix/algorithm/gdraa.hpp"
#include "mimatrix/algorithm/halving_doubling.hpp"
#include "mimatrix/algorithm/hierarchical.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/bootstrap/env.hpp"
#include "mimatrix/bootstrap/memory_store.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;

/// EXPECT_BULK (0 or 1) says whether this run should use the rings.
MIMATRIX_SCENARIO(bulk_exact) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(60));
  const bool expected = std::getenv("EXPECT_BULK") == std::string("1");
  if (comm.transport().uses_bulk_rings() != expected)
    return std::printf("rank %d: bulk rings %s, expected %s\n", comm.rank(),
                       comm.transport().uses_bulk_rings() ? "on" : "off", expected ? "on" : "off"),
           1;
  test::checker c{comm, ""};
  [[maybe_unused]] const int p = comm.size();
  c.run_all<true>("ring", topology::ring{}, algorithm::ring{});  // every dtype: messages, bulk rings
  c.run_all("gdraa on mesh", topology::mesh{}, algorithm::gdraa{});
#ifndef MIMATRIX_TEST_SANITIZER_SUBSET  // under a sanitizer: one algorithm a path, ring and GDRAA
  c.run_all("halving_doubling", topology::ring{}, algorithm::halving_doubling{});
  using nodes = topology::hierarchical<topology::ring, topology::ring>;
  c.run_all("hierarchical", nodes(p % 2 ? 1 : 2), algorithm::default_for<nodes>{});
#endif
  if (c.failures == 0) std::printf("rank %d: bulk exact\n", comm.rank());
  return c.failures == 0 ? 0 : 1;
}

void expect_exact(int ranks, const std::string& provider, const std::vector<std::pair<std::string, std::string>>& env) {
  const auto r = test::run_ranks(ranks, provider, "bulk_exact", env);
  EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  for (int rank = 0; rank < ranks; ++rank)
    EXPECT_NE(r.output[std::size_t(rank)].find("bulk exact"), std::string::npos) << test::all_output(r);
}

TEST(bulk_rings, are_exact_by_default_over_shm) { expect_exact(4, "shm", {{"EXPECT_BULK", "1"}}); }

TEST(bulk_rings, are_exact_with_tiny_chunks_that_keep_the_rings_full) {
  expect_exact(3, "shm", {{"EXPECT_BULK", "1"}, {"MIMATRIX_CHUNK_BYTES", "4096"}});
}

TEST(bulk_rings, off_leaves_chunks_to_the_provider) {
  expect_exact(3, "shm", {{"EXPECT_BULK", "0"}, {"MIMATRIX_BULK", "off"}});
}

TEST(bulk_rings, on_serves_local_ranks_beside_tcp) {
  expect_exact(3, "tcp;ofi_rxm", {{"EXPECT_BULK", "1"}, {"MIMATRIX_BULK", "on"}});
}

TEST(bulk_rings, a_malformed_switch_names_itself) {
  auto store = std::make_shared<bootstrap::memory_store>();
  ::setenv("MIMATRIX_BULK", "yes", 1);
  try {
    fabric f(bootstrap::identity{}, store, {.provider = "shm"});
    ADD_FAILURE() << "accepted MIMATRIX_BULK=yes";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("rank 0: MIMATRIX_BULK must be 'on', 'off' or 'auto', got 'yes'"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv("MIMATRIX_BULK");
}

}  // namespace
}  // namespace mimatrix
