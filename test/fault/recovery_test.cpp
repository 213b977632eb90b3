// A new group without restarting processes (issue 11 item 3): four ranks, one killed
// mid-allreduce; the three survivors fail the call, join generation 2 through the store
// and allreduce exactly; then a process started later joins them in generation 3.
#include "mimatrix/transport/fabric.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/bootstrap/env.hpp"
#include "mimatrix/bootstrap/rendezvous.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;
using clock_type = std::chrono::steady_clock;
using sum_t = allreduce<fabric, topology::ring, reduce::sum<std::int64_t>>;
constexpr auto join_timeout = std::chrono::seconds(20);

/// Joins generation `name` of `size` ranks and checks one allreduce of rank + 1 there.
int join_and_reduce(const std::shared_ptr<bootstrap::store>& store, const std::string& name, int size) {
  const bootstrap::identity id = bootstrap::join(*store, name, size, join_timeout);
  transport::fabric_options o;
  o.group = name;
  communicator<fabric> next(id, store, o);
  sum_t sum(next);
  std::vector<std::int64_t> data(100000, next.rank() + 1);
  sum(data);
  const std::int64_t want = std::int64_t(size) * (size + 1) / 2;
  for (std::int64_t v : data)
    if (v != want) return std::printf("%s: rank %d got %lld want %lld\n", name.c_str(), id.rank, (long long)v, (long long)want), 1;
  return 0;
}

// Started by a survivor once generation 2 works: joins generation 3 with the survivors.
MIMATRIX_SCENARIO(late_joiner) {
  auto store = std::shared_ptr<bootstrap::store>(
      bootstrap::open_store(bootstrap::identity_from_environment(), std::chrono::seconds(10)));
  return join_and_reduce(store, "recovery.g3", 4);
}

MIMATRIX_SCENARIO(recover_after_a_kill) {
  std::shared_ptr<bootstrap::store> store;
  clock_type::time_point failed_at;
  {
    communicator<fabric> world;
    world.set_timeout(std::chrono::seconds(30));
    store = world.transport().store();  // outlives the world: rank 0 serves it
    sum_t sum(world);
    std::vector<std::int64_t> data(std::size_t(1) << 20, 1);
    sum(data);
    test::wait_until_the_others_finished(world, "recovery.first_call");
    if (world.rank() == world.size() - 1) {
      auto pending = sum.start(data);
      (void)pending.test();
      ::kill(::getpid(), SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    try {
      sum(data);
      return std::printf("rank %d: the call with a killed peer succeeded\n", world.rank()), 1;
    } catch (const error& e) {
      failed_at = clock_type::now();
      if (e.code() != errc::peer_lost) return std::printf("rank %d: %s\n", world.rank(), e.what()), 1;
    }
  }  // the world ends: its goodbye after a failure is bounded
  if (join_and_reduce(store, "recovery.g2", 3)) return 1;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - failed_at).count();
  std::printf("RECOVERED %lld ms after the failure\n", static_cast<long long>(ms));
  // A process started now joins generation 3 (this one forks it, as a job server would start it).
  pid_t joiner = -1;
  if (std::atoi(std::getenv("RANK")) == 1) {
    joiner = ::fork();
    if (joiner == 0) {
      ::setenv("MIMATRIX_TEST_SCENARIO", "late_joiner", 1);
      const std::string self = test::self_executable();
      ::execl(self.c_str(), self.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  if (join_and_reduce(store, "recovery.g3", 4)) return 1;
  if (joiner > 0) {
    int status = 0;
    ::waitpid(joiner, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::printf("the late joiner failed: %d\n", status), 1;
  }
  std::printf("GENERATION 3 OK\n");
  return 0;
}

class recovery : public ::testing::TestWithParam<std::string> {};

TEST_P(recovery, survivors_of_a_kill_form_a_new_group_and_a_late_process_joins_the_next) {
  constexpr int ranks = 4;
  const auto r = test::run_ranks(ranks, GetParam(), "recover_after_a_kill", {}, std::chrono::seconds(90));
  ASSERT_FALSE(r.timed_out) << test::all_output(r);
  EXPECT_EQ(r.status[ranks - 1], 128 + SIGKILL) << test::all_output(r);
  for (int rank = 0; rank < ranks - 1; ++rank) {
    EXPECT_EQ(r.status[std::size_t(rank)], 0) << test::all_output(r);
    const std::string& out = r.output[std::size_t(rank)];
    EXPECT_NE(out.find("RECOVERED "), std::string::npos) << test::all_output(r);
    EXPECT_NE(out.find("GENERATION 3 OK"), std::string::npos) << test::all_output(r);
  }
  std::printf("%s", r.output[0].substr(r.output[0].find("RECOVERED")).c_str());  // the time, for the record
}

TEST(join, a_generation_refuses_a_rank_past_its_size_and_names_a_short_one) {
  auto store = std::make_shared<bootstrap::memory_store>();
  std::vector<bootstrap::identity> ids(2);
  std::thread a([&] { ids[0] = bootstrap::join(*store, "g", 2, std::chrono::seconds(5)); });
  ids[1] = bootstrap::join(*store, "g", 2, std::chrono::seconds(5));
  a.join();
  EXPECT_NE(ids[0].rank, ids[1].rank);
  EXPECT_EQ(ids[0].size, 2);
  EXPECT_EQ(ids[0].local_size, 2);
  EXPECT_EQ(ids[0].local_rank + ids[1].local_rank, 1);
  try {
    (void)bootstrap::join(*store, "g", 2, std::chrono::seconds(1));
    FAIL() << "a third rank joined a generation of two";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("2 ranks joined already"), std::string::npos) << e.what();
  }
  try {
    (void)bootstrap::join(*store, "short", 3, std::chrono::milliseconds(200));
    FAIL() << "a generation of three formed with one rank";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::timeout);
    EXPECT_NE(std::string(e.what()).find("1 of 3 ranks joined"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(over, recovery, ::testing::ValuesIn(test::test_providers()),
                         [](const auto& info) { return test::provider_label(info.param); });

}  // namespace
}  // namespace mimatrix
