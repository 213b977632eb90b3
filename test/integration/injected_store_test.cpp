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
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;

/// Stands for a framework's store client (c10d::Store's set, get, add): its own API.
struct framework_kv {
  std::shared_ptr<bootstrap::tcp_store> client;
  void put(const std::string& k, const std::vector<std::byte>& v) { client->set(k, v); }
  std::vector<std::byte> fetch(const std::string& k, std::chrono::milliseconds wait) { return client->get(k, wait); }
  std::int64_t increment(const std::string& k, std::int64_t by) { return client->add(k, by); }
};

/// The adapter a framework author writes: four methods onto the framework's store.
class framework_store final : public bootstrap::store {
 public:
  explicit framework_store(framework_kv kv) : kv_(std::move(kv)) {}
  void set(const std::string& key, const std::vector<std::byte>& value) override {
    check_entry(key, value.size());
    kv_.put(key, value);
  }
  std::vector<std::byte> get(const std::string& key, std::chrono::milliseconds timeout) override {
    return kv_.fetch(key, timeout);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override { return kv_.increment(key, delta); }
  std::string where() const override { return "the framework's store"; }

 private:
  framework_kv kv_;
};

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
