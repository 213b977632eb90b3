// The balancing of local batches by throughput: a throttle that switches on and off moves the
// batches once at most and they settle; a lasting slowdown is followed within a few checks;
// every split keeps a sample a rank and sums to the global batch.
#include "balance.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

namespace MIMATRIX_UNIT_ID {

namespace job = mimatrix::job;
using namespace std::chrono_literals;

/// Two workers under the server's rules: heartbeats (5 a check) feed each one's estimate; at
/// every check a batch off its share by the tolerance, at two checks in a row, re-forms the
/// group with the split of the estimates. The half-life is the server's default: 3 checks.
struct simulated_job {
  static constexpr std::uint32_t global_batch = 100;
  std::chrono::duration<double> half_life = 3s;
  std::vector<job::throughput_estimate> speed{job::throughput_estimate(300), job::throughput_estimate(300)};
  std::vector<std::uint32_t> batch{50, 50};
  job::imbalance_streak streak{2};
  std::chrono::steady_clock::time_point now{};
  int moves = 0;
  std::vector<std::uint32_t> history;  // rank 1's batch after each check

  /// A check interval (1 s) in which the workers measure `measured`.
  void check(const std::vector<double>& measured) {
    for (int beat = 0; beat < 5; ++beat) {
      now += 200ms;
      for (std::size_t r = 0; r < speed.size(); ++r) speed[r].add(measured[r], now, half_life);
    }
    std::vector<double> estimate;
    for (const auto& s : speed) estimate.push_back(*s.known());
    if (streak.confirm(job::off_share(batch, estimate, global_batch, 0.15).has_value())) {
      batch = job::split_by_throughput(estimate, global_batch, 60000).batch;
      streak = job::imbalance_streak{2};
      ++moves;
    }
    EXPECT_EQ(std::accumulate(batch.begin(), batch.end(), 0u), global_batch);
    for (auto b : batch) EXPECT_GE(b, 1u);
    history.push_back(batch[1]);
  }
};

// Rank 1 runs at 300 samples/s, or at 100 while a neighbour's load is on: on and off for
// `half_period` checks each, 40 checks.
simulated_job throttled(int half_period, std::chrono::duration<double> half_life) {
  simulated_job j;
  j.half_life = half_life;
  for (int c = 0; c < 40; ++c) j.check({300.0, (c / half_period) % 2 == 0 ? 300.0 : 100.0});
  return j;
}

TEST(balancing, an_on_off_throttle_moves_the_batches_once_at_most_and_they_settle) {
  for (int half_period : {1, 2, 3, 4}) {
    const simulated_job j = throttled(half_period, 3s);
    EXPECT_LE(j.moves, 1) << "a load switching every " << half_period << " checks";
    // Settled: the last 30 checks keep one batch, between the fast and the slow shares.
    for (std::size_t c = 10; c < j.history.size(); ++c) {
      EXPECT_EQ(j.history[c], j.history[10]) << "check " << c << ", half-period " << half_period;
      EXPECT_GE(j.history[c], 25u);
      EXPECT_LE(j.history[c], 50u);
    }
  }
  // What the damping prevents: following each measurement, the batches swing every time.
  EXPECT_GE(throttled(2, 0s).moves, 10);
  EXPECT_GE(throttled(4, 0s).moves, 5);
}

TEST(balancing, a_lasting_slowdown_is_followed_within_a_few_checks) {
  simulated_job j;
  for (int c = 0; c < 5; ++c) j.check({300.0, 300.0});
  EXPECT_EQ(j.moves, 0);
  for (int c = 0; c < 25; ++c) j.check({300.0, 100.0});
  // The first move within 3 checks of the change, and within 15 the batch is inside the
  // tolerance of the new share, 25 of 100 (B·100/400), where it stays.
  ASSERT_GE(j.history.size(), 30u);
  EXPECT_LT(j.history[5 + 2], 50u);
  for (std::size_t c = 5 + 15; c < j.history.size(); ++c) {
    EXPECT_LE(j.history[c], 28u) << "check " << c;
    EXPECT_GE(j.history[c], 25u) << "check " << c;
  }
  EXPECT_LE(j.moves, 3);
}

TEST(balancing, the_first_measurement_replaces_the_declared_throughput) {
  const auto t0 = std::chrono::steady_clock::time_point{};
  job::throughput_estimate e(100);
  EXPECT_EQ(e.known(), 100.0);
  e.add(0, t0, 1s);  // no measurement yet (a heartbeat before the first step)
  EXPECT_EQ(e.known(), 100.0);
  e.add(5000, t0, 1s);
  EXPECT_EQ(e.known(), 5000.0);
  e.add(1000, t0 + 1s, 1s);  // one half-life later: half way
  EXPECT_DOUBLE_EQ(*e.known(), 3000.0);
  job::throughput_estimate none(0);  // nothing declared: not known until measured
  EXPECT_FALSE(none.known().has_value());
  none.add(0, t0, 1s);
  EXPECT_FALSE(none.known().has_value());
  none.add(250, t0, 1s);
  EXPECT_EQ(none.known(), 250.0);
}

// A worker that joins a running job and declares nothing (resnet_train) took 1 sample/s
// against its peers' hundreds, so a batch of 1 until measured (a black-box test). It now
// counts at the mean of the measured members: an equal share.
TEST(balancing, a_worker_that_declares_nothing_starts_at_the_mean_of_the_known_ones) {
  const auto speed = job::speeds_for_split({300.0, 100.0, std::nullopt});
  ASSERT_EQ(speed.size(), 3u);
  EXPECT_EQ(speed[2], 200.0);
  const auto sp = job::split_by_throughput(speed, 120, 60000);
  EXPECT_EQ(sp.batch, (std::vector<std::uint32_t>{60, 20, 40}));
  // None known (a job's first generation of workers that declared nothing): even shares.
  EXPECT_EQ(job::split_by_throughput(job::speeds_for_split({std::nullopt, std::nullopt}), 100, 0).batch,
            (std::vector<std::uint32_t>{50, 50}));
  // A lone unknown worker beside measured ones is not an imbalance to re-form for.
  EXPECT_FALSE(job::off_share({60, 20, 40}, speed, 120, 0.15).has_value());
}

TEST(balancing, a_batch_inside_the_tolerance_of_its_share_stays) {
  // Shares 25/75 of 100 by 1:3; 28 is within 15% of 25, 29 is not.
  EXPECT_FALSE(job::off_share({28, 72}, {100, 300}, 100, 0.15).has_value());
  const auto gap = job::off_share({29, 71}, {100, 300}, 100, 0.15);
  ASSERT_TRUE(gap.has_value());
  EXPECT_EQ(gap->rank, 0u);
  EXPECT_EQ(gap->have, 29u);
  EXPECT_EQ(gap->want, 25u);
}

}  // namespace
