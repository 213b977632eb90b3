// Abort from any thread (issue 11 item 2): a watchdog thread on one rank aborts the
// communicator while three ranks wait in an allreduce that a fourth never joins. Every
// pending call fails with `aborted` naming the rank and the reason, the idle rank learns
// it from async_error() before it calls, and its later call fails at once. Each rank
// prints when (system clock, one host) so the parent measures abort-to-error times. With
// the progress thread, ranks between calls learn of an abort at their first ask.
#include "mimatrix/transport/fabric.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
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
using sum_t = allreduce<fabric, topology::ring, reduce::sum<std::int64_t>>;
constexpr int watchdog = 1, idle = 2;

long long now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// One trial; prints "ABORTED <trial> <us>" when this rank's error came (or, on the
/// watchdog, when it aborted), "BAD ..." when something else happened.
int trial(int t, const std::shared_ptr<bootstrap::store>& store) {
  communicator<fabric> comm(bootstrap::identity_from_environment(), store);
  comm.set_timeout(std::chrono::seconds(30));
  const int r = comm.rank();
  sum_t sum(comm);
  std::vector<std::int64_t> data(1000, 1);
  sum(data);  // every rank is up
  // ... and has finished that call before the watchdog starts its clock (CI flake: under
  // ASan over tcp, rank 0's first call still ran 100 ms after the watchdog's had ended).
  const std::string finished_first = "abort_test/" + std::to_string(t) + "/finished_first";
  store->add(finished_first, 1);
  const auto expect_aborted = [&](const error& e) {
    const std::string what = e.what();
    if (e.code() != errc::aborted || what.find("rank 1 aborted the communicator: watchdog saw no progress") ==
                                         std::string::npos)
      return std::printf("BAD rank %d trial %d: %s\n", r, t, what.c_str()), 1;
    return 0;
  };
  if (r == idle) {
    // Not in any call: the query tells it, then a call fails at once.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    std::optional<error> e;
    while (!(e = comm.async_error()) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!e) return std::printf("BAD rank %d trial %d: async_error() said nothing\n", r, t), 1;
    std::printf("ABORTED %d %lld\n", t, now_us());
    if (expect_aborted(*e)) return 1;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      sum(data);
      return std::printf("BAD rank %d trial %d: a call after the abort succeeded\n", r, t), 1;
    } catch (const error& late) {
      if (expect_aborted(late)) return 1;
      if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(100))
        return std::printf("BAD rank %d trial %d: the call after the abort took long\n", r, t), 1;
    }
    return 0;
  }
  std::thread dog;
  if (r == watchdog) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (store->add(finished_first, 0) < comm.size() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    dog = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::printf("ABORT %d %lld\n", t, now_us());
      comm.abort("watchdog saw no progress");
    });
  }
  int rc = 0;
  try {
    sum(data);  // the idle rank never joins: only the abort ends it
    std::printf("BAD rank %d trial %d: the call succeeded\n", r, t);
    rc = 1;
  } catch (const error& e) {
    std::printf("ABORTED %d %lld\n", t, now_us());
    rc = expect_aborted(e);
  }
  if (dog.joinable()) dog.join();
  return rc;
}

MIMATRIX_SCENARIO(watchdog_abort) {
  const int trials = std::atoi(std::getenv("MIMATRIX_TEST_TRIALS"));
  // One store for every trial: rank 0 serves it on MASTER_PORT until the last is over.
  const auto id = bootstrap::identity_from_environment();
  const std::shared_ptr<bootstrap::store> store(bootstrap::open_store(id, std::chrono::seconds(10)));
  for (int t = 0; t < trials; ++t)
    if (trial(t, store)) return 1;
  bootstrap::barrier(*store, "abort_test/done", id.size, std::chrono::seconds(10));
  // Rank 0 serves the store: it leaves only after every other rank has read the barrier's
  // end (CI flake: rank 0 arrived last, returned and exited while rank 2 still waited on
  // the store for the end).
  if (id.rank != 0) {
    store->add("abort_test/left", 1);
    return 0;
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (store->add("abort_test/left", 0) < id.size - 1 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return 0;
}

// No call yet (over tcp no connection either), the progress thread on: rank 1 aborts and
// the others, outside any call, ask async_error() once, 500 ms later.
MIMATRIX_SCENARIO(abort_between_calls) {
  communicator<fabric> comm;
  comm.set_progress(progress_mode::thread);
  if (comm.rank() == watchdog) comm.abort("watchdog saw no progress");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::optional<error> e = comm.async_error();
  std::printf("ASKED %s\n", e ? e->what() : "nothing");
  return 0;
}

/// Per trial, the time from the abort to the last rank's error, in microseconds.
std::vector<long long> abort_to_last_error(const bootstrap::launch_result& r, int trials) {
  std::map<int, long long> aborted_at, last_error;
  for (const std::string& out : r.output) {
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      std::istringstream words(line.substr(line.find(']') == std::string::npos ? 0 : line.find(']') + 2));
      std::string tag;
      int t = 0;
      long long us = 0;
      if (!(words >> tag >> t >> us)) continue;
      if (tag == "ABORT") aborted_at[t] = us;
      if (tag == "ABORTED") last_error[t] = std::max(last_error[t], us);
    }
  }
  std::vector<long long> delays;
  for (int t = 0; t < trials; ++t)
    if (aborted_at.count(t) && last_error.count(t)) delays.push_back(last_error[t] - aborted_at[t]);
  return delays;
}

void run_trials(const std::string& provider, int trials) {
  constexpr int ranks = 4;
  const auto r = test::run_ranks(ranks, provider, "watchdog_abort", {{"MIMATRIX_TEST_TRIALS", std::to_string(trials)}},
                                 std::chrono::seconds(30 + 3 * trials));
  ASSERT_EQ(r.exit_code, 0) << test::all_output(r);
  auto delays = abort_to_last_error(r, trials);
  ASSERT_EQ(delays.size(), std::size_t(trials)) << test::all_output(r);
  std::sort(delays.begin(), delays.end());
  std::printf("%s: abort to every rank's error over %d trials: median %.1f ms, max %.1f ms\n", provider.c_str(),
              trials, delays[delays.size() / 2] / 1000.0, delays.back() / 1000.0);
  EXPECT_LT(delays.back(), 30'000'000) << "an error later than the communicator's timeout";
}

class abort_test : public ::testing::TestWithParam<std::string> {};

TEST_P(abort_test, a_watchdog_thread_ends_every_ranks_calls_with_aborted_and_later_calls_fail_at_once) {
  run_trials(GetParam(), 3);
}

// Regression: an idle rank's async_error() reported a peer's abort only after about 20
// asks over tcp (2-3 over shm), so a watchdog asking once a second learned of it after
// some 20 s: only calls progressed the endpoint. The progress thread now reads it between
// calls too (every transport::idle_poll).
TEST_P(abort_test, idle_ranks_with_the_progress_thread_learn_of_an_abort_at_their_first_ask) {
  const auto r = test::run_ranks(3, GetParam(), "abort_between_calls", {}, std::chrono::seconds(30));
  ASSERT_EQ(r.exit_code, 0) << test::all_output(r);
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_NE(r.output[std::size_t(rank)].find("ASKED rank " + std::to_string(rank) +
                                               ": rank 1 aborted the communicator: watchdog saw no progress"),
              std::string::npos)
        << test::all_output(r);
}

// The long tier's measurement: 100 trials.
TEST_P(abort_test, DISABLED_hundred_trials) { run_trials(GetParam(), 100); }

INSTANTIATE_TEST_SUITE_P(over, abort_test, ::testing::ValuesIn(test::test_providers()),
                         [](const auto& info) { return test::provider_label(info.param); });

}  // namespace
}  // namespace mimatrix
