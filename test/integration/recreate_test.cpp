// The world communicator destroyed and made again from the environment, in a loop (as
// ncclCommDestroy and a new ncclCommInitRank), and two of them at once. Rank 0's process
// serves the store on MASTER_PORT: before, each communicator started and stopped its own
// server, so ranks that left a tear-down first reached the old server from their next
// communicator and lost it under them ("the server closed the connection while waiting for
// key 'mimatrix/fabric/world/N/addr/0'"), while rank 0 waited in the new one; and a second
// communicator on rank 0 could not bind the port the first held. Each communicator's keys
// are erased from the store once all its ranks said goodbye: a loop does not fill it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <tuple>

#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/collectives.hpp"
#include "mimatrix/communicator.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;

/// 0 + 1 + ... + (size - 1) + size * round on every rank, or a line saying what came.
int check_sum(collectives<fabric>& coll, int rank, int size, int round) {
  std::int32_t v = rank + round;
  coll.allreduce(&v, &v, 1, dtype::int32, reduce::op_kind::sum).wait();
  const std::int32_t want = size * (size - 1) / 2 + size * round;
  if (v == want) return 0;
  std::printf("rank %d, round %d: got %d want %d\n", rank, round, v, want);
  return 1;
}

/// Whether keys of the communicators before `round` are left in the store (every rank has
/// said goodbye to them, as all are in this round's). This round's must be there: they
/// prove the names are the ones the endpoint uses.
bool leftover_keys(bootstrap::store& store, int round) {
  const auto group = [](int r) { return "mimatrix/fabric/world/" + std::to_string(r) + "/"; };
  try {
    store.get(group(round) + "addr/0", std::chrono::milliseconds(0));
  } catch (const error& e) {
    std::printf("round %d: its own keys are not where expected: %s\n", round, e.what());
    return true;
  }
  for (int r = 0; r < round; ++r)
    if (const auto left = store.erase_prefix(group(r))) {
      std::printf("round %d: %lld keys of the communicator of round %d were left in the store\n", round,
                  static_cast<long long>(left), r);
      return true;
    }
  return false;
}

MIMATRIX_SCENARIO(recreate_the_world) {
  constexpr int rounds = 8;
  for (int round = 0; round < rounds; ++round) {
    std::shared_ptr<bootstrap::store> kept;
    {
      communicator<fabric> comm;
      collectives<fabric> coll(comm);
      if (check_sum(coll, comm.rank(), comm.size(), round)) return 1;
      if (comm.rank() == 0 && round > 0 && leftover_keys(*comm.transport().store(), round)) return 1;
      // Every other round rank 0 lets go of the store last, as a slower tear-down (shm's,
      // usually) or a framework that keeps the job's store would: the others are already
      // in the next round's rendezvous.
      if (comm.rank() == 0 && round % 2) kept = comm.transport().store();
    }
    if (kept) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::printf("RECREATED OK\n");
  return 0;
}

MIMATRIX_SCENARIO(two_worlds_at_once) {
  communicator<fabric> first;
  communicator<fabric> second;
  collectives<fabric> a(first), b(second);
  if (check_sum(a, first.rank(), first.size(), 0) || check_sum(b, second.rank(), second.size(), 1)) return 1;
  std::printf("TWO WORLDS OK\n");
  return 0;
}

class recreate : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void expect_every_rank(const char* scenario, const char* ok) {
    const auto& [provider, ranks] = GetParam();
    const auto r = test::run_ranks(ranks, provider, scenario, {}, std::chrono::seconds(60));
    ASSERT_EQ(r.exit_code, 0) << test::all_output(r);
    for (int rank = 0; rank < ranks; ++rank)
      EXPECT_NE(r.output[std::size_t(rank)].find(ok), std::string::npos) << test::all_output(r);
  }
};

TEST_P(recreate, the_world_communicator_is_destroyed_and_made_again_at_once_round_after_round) {
  expect_every_rank("recreate_the_world", "RECREATED OK");
}

TEST_P(recreate, two_world_communicators_from_the_environment_live_at_once) {
  expect_every_rank("two_worlds_at_once", "TWO WORLDS OK");
}

INSTANTIATE_TEST_SUITE_P(over, recreate,
                         ::testing::Combine(::testing::ValuesIn(test::test_providers()), ::testing::Values(3)),
                         test::provider_and_ranks_name);

}  // namespace
}  // namespace mimatrix
