// A framework's own store as the way in (issue 11 item 4): the framework serves its store
// on MASTER_PORT (as c10d's TCPStore does), and mimatrix meets through it via a
// four-method adapter, binding no port of its own.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/bootstrap/env.hpp"
#include "mimatrix/bootstrap/tcp_store.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "framework_store.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using test::framework_kv;
using test::framework_store;
using transport::fabric;

MIMATRIX_SCENARIO(through_the_frameworks_store) {
  const bootstrap::identity id = bootstrap::identity_from_environment();
  const int port = std::atoi(std::getenv("MASTER_PORT"));
  // The framework's store owns MASTER_PORT: rank 0 serves it.
  auto client = std::make_shared<bootstrap::tcp_store>("127.0.0.1", port, id.rank == 0, std::chrono::seconds(10));
  auto store = std::make_shared<framework_store>(framework_kv{client});
  communicator<fabric> comm(id, store);
  allreduce<fabric, topology::ring, reduce::sum<std::int64_t>> sum(comm);
  std::vector<std::int64_t> data(50000, comm.rank() + 1);
  sum(data);
  const std::int64_t want = std::int64_t(comm.size()) * (comm.size() + 1) / 2;
  for (std::int64_t v : data)
    if (v != want) return std::printf("rank %d: got %lld want %lld\n", comm.rank(), (long long)v, (long long)want), 1;
  std::printf("INJECTED OK\n");
  return 0;
}

class injected_store : public ::testing::TestWithParam<std::string> {};

TEST_P(injected_store, a_frameworks_store_on_master_port_is_the_way_in_and_mimatrix_binds_no_port) {
  constexpr int ranks = 3;
  const auto r = test::run_ranks(ranks, GetParam(), "through_the_frameworks_store", {}, std::chrono::seconds(60));
  ASSERT_EQ(r.exit_code, 0) << test::all_output(r);
  for (int rank = 0; rank < ranks; ++rank)
    EXPECT_NE(r.output[std::size_t(rank)].find("INJECTED OK"), std::string::npos) << test::all_output(r);
}

INSTANTIATE_TEST_SUITE_P(over, injected_store, ::testing::ValuesIn(test::test_providers()),
                         [](const auto& info) { return test::provider_label(info.param); });

}  // namespace
}  // namespace mimatrix
