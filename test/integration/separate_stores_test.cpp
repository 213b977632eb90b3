// Groups over separate stores need no names (issue 53, defect 5): a store is a namespace,
// as c10d hands each new_group's backend a store of its own. Process 0 joins {0,1}
// through one store and then {0,2} through another; process 2 joins only {0,2}. Both
// groups keep the default name "world".
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
#include "mimatrix/bootstrap/rendezvous.hpp"
#include "mimatrix/bootstrap/tcp_store.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "framework_store.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using test::framework_kv;
using test::framework_store;
using transport::fabric;

/// Rank `rank` of a group of two on this host.
bootstrap::identity pair_rank(int rank) {
  bootstrap::identity id;
  id.rank = id.local_rank = rank;
  id.size = id.local_size = 2;
  return id;
}

/// A group of two through `store`, named by default; allreduces `value` and checks `want`.
int pair_sums(int rank, std::shared_ptr<bootstrap::store> store, std::int64_t value, std::int64_t want,
              const char* what) {
  // Short: before, the second group waited out this deadline ("rank(s) 1 did not publish").
  communicator<fabric> comm(pair_rank(rank), std::move(store), transport::fabric_options{.startup_timeout = 4000ms});
  allreduce<fabric, topology::ring, reduce::sum<std::int64_t>> sum(comm);
  std::vector<std::int64_t> data(3001, value);
  sum(data);
  for (std::int64_t v : data)
    if (v != want) return std::printf("%s: rank %d got %lld want %lld\n", what, rank, (long long)v, (long long)want), 1;
  return 0;
}

MIMATRIX_SCENARIO(two_groups_through_two_stores) {
  const int r = bootstrap::identity_from_environment().rank;
  const int port = std::atoi(std::getenv("MASTER_PORT"));
  // Store A on MASTER_PORT (rank 0 serves it), reached by every process: the test's own
  // signals go through it. Store B: process 0 serves it on a port the kernel picks.
  auto a = std::make_shared<bootstrap::tcp_store>("127.0.0.1", port, r == 0, 10s);
  std::shared_ptr<bootstrap::tcp_store> b;
  if (r == 0) {
    b = std::make_shared<bootstrap::tcp_store>("127.0.0.1", 0, true, 10s);
    a->set("test/b_port", bootstrap::bytes_of(std::to_string(b->port())));
  } else if (r == 2) {
    const int b_port = std::stoi(bootstrap::text_of(a->get("test/b_port", 30s)));
    b = std::make_shared<bootstrap::tcp_store>("127.0.0.1", b_port, false, 10s);
  }
  // Each framework hands mimatrix its own adapter, whose where() does not tell them apart.
  if (r <= 1 && pair_sums(r, std::make_shared<framework_store>(framework_kv{a}), r + 1, 1 + 2, "{0,1} through A"))
    return 1;
  if (r == 0) a->set("test/first_done", {});
  if (r == 2) (void)a->get("test/first_done", 60s);  // process 0 is in {0,2} only now
  if ((r == 0 || r == 2) &&
      pair_sums(r == 0 ? 0 : 1, std::make_shared<framework_store>(framework_kv{b}), r + 1, 1 + 3, "{0,2} through B"))
    return 1;
  bootstrap::barrier(*a, "test/end", 3, 60s);  // rank 0 serves both stores until everyone is done
  std::printf("TWO STORES OK\n");
  return 0;
}

// Regression (issue 53, defect 5): process 0 counted {0,2} as its second "world" endpoint
// (world/1), process 2 as its first (world/0); the group timed out after 4000 ms.
TEST(separate_stores, a_process_in_groups_through_two_stores_meets_each_without_naming_them) {
  test::expect_every_rank(3, "shm", "two_groups_through_two_stores", "TWO STORES OK");
}

}  // namespace
}  // namespace mimatrix
