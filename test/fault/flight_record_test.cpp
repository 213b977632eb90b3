// The flight record on the three classic hangs (a rank that never calls, a rank stopped
// mid-call, ranks that started different calls): every rank leaves a dump, by itself at
// its timeout, by the signal or by the API, and scripts/mimatrix-trace names the rank and
// the call. And a dump taken during calls changes no result.
#include "mimatrix/transport/fabric.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/collectives.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;
using sum_t = allreduce<fabric, topology::ring, reduce::sum<std::int64_t>>;
constexpr auto deadline = std::chrono::milliseconds(2000);
constexpr auto past_the_deadline = std::chrono::milliseconds(3500);

/// Every rank's first call, which all finish: the hang is in the second.
void first_call(communicator<fabric>& comm) {
  comm.set_timeout(deadline);
  sum_t sum(comm);
  std::vector<std::int64_t> v(1000, 1);
  sum(v);
}

/// The second call, which hangs: its error (a timeout, most) is printed, not a failure.
void hung_call(communicator<fabric>& comm, std::size_t count) {
  sum_t sum(comm);
  std::vector<std::int64_t> v(count, 1);
  try {
    sum(v);
    std::printf("rank %d: the call succeeded\n", comm.rank());
  } catch (const error& e) {
    std::printf("rank %d: %s\n", comm.rank(), e.what());
  }
}

// The last rank never starts call #1: it sleeps past the others' deadline, then dumps
// through the API. The others dump by themselves at their timeout.
MIMATRIX_SCENARIO(flight_rank_never_calls) {
  communicator<fabric> comm;
  first_call(comm);
  if (comm.rank() != comm.size() - 1) return hung_call(comm, 1000), 0;
  std::this_thread::sleep_for(past_the_deadline);
  std::printf("DUMPED %s\n", comm.dump_flight_record().c_str());
  return 0;
}

// Rank 2 starts call #1 and then neither tests nor waits (a rank stopped mid-call, busy
// outside mimatrix: only the API, from any of its threads, dumps it). The others, stuck in
// wait(), are sent SIGUSR1 a second in: their dump (copied to signal.rank<r>.json before
// their timeout's own replaces it) shows the call started and the step it waits on.
// Every rank starts the call alike, through collectives<> with the ring (another
// interface's topology would be a mismatch; the ring's later sends wait for receives).
MIMATRIX_SCENARIO(flight_rank_stopped_mid_call) {
  communicator<fabric> comm;
  first_call(comm);
  collectives<fabric> on(comm);
  std::vector<std::int64_t> v(1000, 1);
  call_options ring;
  ring.algorithm = "ring";
  request pending = on.allreduce(v.data(), v.data(), v.size(), dtype::int64, reduce::op_kind::sum, ring);
  if (comm.rank() == 2) {
    std::this_thread::sleep_for(past_the_deadline);
    std::printf("DUMPED %s\n", comm.dump_flight_record().c_str());
    std::fflush(stdout);
    std::_Exit(0);  // the request's end would fail the call and dump again
  }
  std::thread user([&] {
    std::this_thread::sleep_for(deadline / 2);
    ::raise(SIGUSR1);
    const std::filesystem::path dir = std::getenv("MIMATRIX_FLIGHT_RECORD_DIR");
    const auto dump = dir / ("flight.world-0.rank" + std::to_string(comm.rank()) + ".json");
    for (int k = 0; k < 200 && !std::filesystem::exists(dump); ++k)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::error_code ec;
    std::filesystem::copy_file(dump, dir / ("signal.rank" + std::to_string(comm.rank()) + ".json"), ec);
  });
  try {
    pending.wait();
    std::printf("rank %d: the call succeeded\n", comm.rank());
  } catch (const error& e) {
    std::printf("rank %d: %s\n", comm.rank(), e.what());
  }
  user.join();
  // A rank whose call ended before the signal (rank 2's first sends may be all it needed)
  // sat outside mimatrix, where no one serves a signal: its watchdog dumps by the API.
  const std::filesystem::path dir = std::getenv("MIMATRIX_FLIGHT_RECORD_DIR");
  if (!std::filesystem::exists(dir / ("flight.world-0.rank" + std::to_string(comm.rank()) + ".json")))
    (void)comm.dump_flight_record();
  return 0;
}

// Rank 1 calls #1 with another count; every rank dumps through the API once its call ended.
MIMATRIX_SCENARIO(flight_ranks_disagree) {
  communicator<fabric> comm;
  first_call(comm);
  hung_call(comm, comm.rank() == 1 ? 500 : 1000);
  std::printf("DUMPED %s\n", comm.dump_flight_record().c_str());
  return 0;
}

// Dumps by the API and by the signal (served at the calls' starts, tests and idle
// pauses), from another thread, while calls run: every sum exact.
MIMATRIX_SCENARIO(flight_dump_during_calls) {
  communicator<fabric> comm;
  sum_t sum(comm);
  std::atomic<bool> done{false};
  std::thread dumper([&] {
    for (int k = 0; !done; ++k) {
      if (k % 2) (void)comm.dump_flight_record();
      else ::raise(SIGUSR1);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  int wrong = 0;
  const std::int64_t p = comm.size();
  for (std::int64_t k = 0; k < 300; ++k) {
    std::vector<std::int64_t> v(1 + std::size_t(k % 7) * 1000, comm.rank() + k);
    sum(v);
    for (std::int64_t x : v) wrong += x != p * (p - 1) / 2 + p * k;
  }
  done = true;
  dumper.join();
  std::printf("WRONG %d\n", wrong);
  return wrong ? 1 : 0;
}

class flight_record : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("mimatrix-flight-" + std::to_string(::getpid()) + "-" + test::provider_label(GetParam()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// Runs `scenario` on `ranks`, expects every rank's dump, and returns the analyser's report.
  std::string run_and_analyse(const std::string& scenario, int ranks) {
    const auto r = test::run_ranks(ranks, GetParam(), scenario,
                                   {{"MIMATRIX_FLIGHT_RECORD", "2000"}, {"MIMATRIX_FLIGHT_RECORD_DIR", dir_.string()}}, std::chrono::seconds(60));
    EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
    for (int k = 0; k < ranks; ++k)
      EXPECT_TRUE(std::filesystem::exists(dir_ / ("flight.world-0.rank" + std::to_string(k) + ".json")))
          << "no dump of rank " << k << "\n" << test::all_output(r);
    const std::string command = "python3 " MIMATRIX_SOURCE_DIR "/scripts/mimatrix-trace " + dir_.string() + " 2>&1";
    std::string report;
    if (std::FILE* out = ::popen(command.c_str(), "r")) {
      char buffer[4096];
      for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, out)) > 0;) report.append(buffer, n);
      ::pclose(out);
    }
    if (std::getenv("MIMATRIX_TEST_SHOW_REPORT")) std::printf("%s\n", report.c_str());
    return report + "\n(ranks said)\n" + test::all_output(r);
  }

  std::filesystem::path dir_;
};

TEST_P(flight_record, a_rank_that_never_calls_is_named_with_the_call) {
  const std::string report = run_and_analyse("flight_rank_never_calls", 4);
  EXPECT_NE(report.find("never started: allreduce #1 (count 1000, int64, sum; ring) was not started by rank 3"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("oldest unfinished: allreduce #1"), std::string::npos) << report;
  EXPECT_NE(report.find("root: rank 3 (never started the call)"), std::string::npos) << report;
  EXPECT_EQ(report.find("disagree"), std::string::npos) << report;
}

TEST_P(flight_record, a_rank_stopped_mid_call_is_the_root_of_the_waits) {
  const std::string report = run_and_analyse("flight_rank_stopped_mid_call", 4);
  EXPECT_NE(report.find("never started: none"), std::string::npos) << report;
  EXPECT_NE(report.find("oldest unfinished: allreduce #1"), std::string::npos) << report;
  EXPECT_NE(report.find("root: rank 2 (started the call but waits on no one"), std::string::npos) << report;
  EXPECT_NE(report.find("-> rank 2: failed"), std::string::npos) << "someone waits on rank 2\n" << report;
  for (int rank : {0, 1, 3}) {
    if (report.find("[" + std::to_string(rank) + "] rank " + std::to_string(rank) + ": the call succeeded") !=
        std::string::npos)
      continue;  // it ended before the signal: no call of it was in flight
    std::ifstream in(dir_ / ("signal.rank" + std::to_string(rank) + ".json"));
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_NE(text.str().find("\"reason\": \"signal\""), std::string::npos) << "rank " << rank << ": " << text.str();
    EXPECT_NE(text.str().find("\"state\": \"started\", \"started_us\""), std::string::npos) << text.str();
    EXPECT_NE(text.str().find("\"waiting\": {\"step\""), std::string::npos) << text.str();
  }
}

TEST_P(flight_record, ranks_that_started_different_calls_are_named) {
  const std::string report = run_and_analyse("flight_ranks_disagree", 3);
  EXPECT_NE(report.find("disagree: #1: allreduce count 1000 int64 tag 0 on rank 0, rank 2; allreduce count 500 "
                        "int64 tag 0 on rank 1"),
            std::string::npos)
      << report;
}

TEST_P(flight_record, dumps_during_calls_change_no_sum) {
  const auto r = test::run_ranks(3, GetParam(), "flight_dump_during_calls",
                                 {{"MIMATRIX_FLIGHT_RECORD", "2000"}, {"MIMATRIX_FLIGHT_RECORD_DIR", dir_.string()}}, std::chrono::seconds(60));
  ASSERT_EQ(r.exit_code, 0) << test::all_output(r);
  for (const std::string& out : r.output) EXPECT_NE(out.find("WRONG 0"), std::string::npos) << test::all_output(r);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "flight.world-0.rank0.json"));
}

INSTANTIATE_TEST_SUITE_P(over, flight_record, ::testing::ValuesIn(test::test_providers()),
                         [](const auto& info) { return test::provider_label(info.param); });

}  // namespace MIMATRIX_UNIT_ID
}  // namespace mimatrix
