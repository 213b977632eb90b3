// transport/fabric/provider_watch.hpp: a provider call inside past its limit is reported
// once, with its name; calls that return in time never are; the limit follows the latest
// call's deadline, above a floor; a process stopped and resumed does not find its call late
// (ticks, not time); the report names stopped and ended peers on this host, and ends the
// process with the documented code.
#include "mimatrix/transport/fabric/provider_watch.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/marked_child.hpp"

namespace MIMATRIX_UNIT_ID {

using mimatrix::bootstrap::detail::process_mark;
using mimatrix::test::spawn_marked_child;
using mimatrix::transport::detail::fabric::lock_holders;
using mimatrix::transport::detail::fabric::provider_watch;
using mimatrix::transport::detail::fabric::report_stuck;
using mimatrix::transport::detail::fabric::stuck_report;
using namespace std::chrono_literals;

// What the watch told, from its thread.
struct told {
  std::mutex mutex;
  struct call {
    std::string name;
    int peer;
    std::chrono::milliseconds inside;
  };
  std::vector<call> calls;
  provider_watch::on_stuck act() {
    return [this](const char* name, int peer, std::chrono::milliseconds inside) {
      std::lock_guard lock(mutex);
      calls.push_back({name, peer, inside});
    };
  }
  std::size_t count() {
    std::lock_guard lock(mutex);
    return calls.size();
  }
};

TEST(provider_watch, a_call_inside_past_its_limit_is_told_once_with_its_name) {
  told t;
  provider_watch watch(5ms, 60ms, t.act());
  const auto start = std::chrono::steady_clock::now();
  const int r = watch.call("fi_tsenddata", 3, [&] {
    while (t.count() == 0 && std::chrono::steady_clock::now() - start < 10s) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(100ms);  // more ticks past the limit: still told once
    return 7;
  });
  EXPECT_EQ(r, 7);  // the call's result passes through
  EXPECT_FALSE(watch.inside());
  ASSERT_EQ(t.count(), 1u);
  EXPECT_EQ(t.calls[0].name, "fi_tsenddata");
  EXPECT_EQ(t.calls[0].peer, 3);
  EXPECT_GT(t.calls[0].inside, 60ms);
}

TEST(provider_watch, calls_that_return_in_time_are_never_told) {
  told t;
  provider_watch watch(2ms, 40ms, t.act());
  for (int k = 0; k < 30; ++k) {
    watch.call("fi_tsenddata", 1, [] { std::this_thread::sleep_for(10ms); });
    EXPECT_FALSE(watch.inside());
  }
  std::this_thread::sleep_for(60ms);  // nothing inside: nothing to tell
  EXPECT_EQ(t.count(), 0u);
}

TEST(provider_watch, a_second_stuck_call_is_told_again) {
  told t;
  provider_watch watch(2ms, 20ms, t.act());
  for (const char* name : {"fi_writedata", "fi_trecv"}) {
    const auto start = std::chrono::steady_clock::now();
    const std::size_t before = t.count();
    watch.call(name, -1, [&] {
      while (t.count() == before && std::chrono::steady_clock::now() - start < 10s) std::this_thread::sleep_for(1ms);
    });
  }
  ASSERT_EQ(t.count(), 2u);
  EXPECT_EQ(t.calls[0].name, "fi_writedata");
  EXPECT_EQ(t.calls[1].name, "fi_trecv");
}

TEST(provider_watch, the_limit_follows_the_latest_calls_deadline_above_the_floor) {
  told t;
  provider_watch watch(5ms, 20ms, t.act());
  watch.allow_call(provider_watch::floor + 1s);  // a 3 s deadline: 3.5 s for one provider call
  watch.call("fi_cq_read", -1, [] { std::this_thread::sleep_for(150ms); });
  EXPECT_EQ(t.count(), 0u);
  watch.allow(20ms);  // and back
  const auto start = std::chrono::steady_clock::now();
  watch.call("fi_cq_read", -1, [&] {
    while (t.count() == 0 && std::chrono::steady_clock::now() - start < 10s) std::this_thread::sleep_for(1ms);
  });
  EXPECT_EQ(t.count(), 1u);
  watch.allow_call(10ms);
  EXPECT_EQ(watch.limit(), provider_watch::floor);
  watch.allow_call(3s);
  EXPECT_EQ(watch.limit(), 3s + provider_watch::grace);
}

// A child whose watch sees one call stay inside while the child is stopped for longer than
// the limit; resumed, the call returns at once. Exit status: 0 untold, 1 told.
TEST(provider_watch, a_process_stopped_and_resumed_does_not_find_its_call_late) {
  int inside[2], release[2];
  ASSERT_EQ(::pipe(inside), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::atomic<bool> was_told{false};
    {
      provider_watch watch(10ms, 500ms, [&](const char*, int, std::chrono::milliseconds) { was_told = true; });
      watch.call("fi_tsenddata", 0, [&] {
        std::this_thread::sleep_for(50ms);  // the watch has seen the call before the stop
        (void)!::write(inside[1], "i", 1);
        char c;
        (void)!::read(release[0], &c, 1);
      });
    }
    ::_exit(was_told ? 1 : 0);
  }
  char c;
  ASSERT_EQ(::read(inside[0], &c, 1), 1);
  ::kill(pid, SIGSTOP);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, WUNTRACED), pid);
  std::this_thread::sleep_for(1500ms);  // three limits of time, no ticks
  ::kill(pid, SIGCONT);
  std::this_thread::sleep_for(50ms);
  ASSERT_EQ(::write(release[1], "r", 1), 1);
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the stopped time was counted as time inside the call";
  for (int fd : {inside[0], inside[1], release[0], release[1]}) ::close(fd);
}

TEST(provider_watch, the_report_names_the_stopped_peers_else_the_ended_ones) {
  auto [running_pid, running] = spawn_marked_child();
  auto [stopped_pid, stopped] = spawn_marked_child();
  auto [killed_pid, killed] = spawn_marked_child();
  int status = 0;
  ::kill(stopped_pid, SIGSTOP);
  ASSERT_EQ(::waitpid(stopped_pid, &status, WUNTRACED), stopped_pid);
  ::kill(killed_pid, SIGKILL);
  ASSERT_EQ(::waitpid(killed_pid, &status, 0), killed_pid);
  const std::vector<std::pair<int, process_mark>> peers{{1, running}, {2, stopped}, {3, killed}};
  EXPECT_EQ(lock_holders(peers), "rank 2 (pid " + std::to_string(stopped_pid) + ") is stopped");  // the likelier
  EXPECT_EQ(lock_holders({{1, running}, {3, killed}}), "rank 3 (pid " + std::to_string(killed_pid) + ") has ended");
  EXPECT_EQ(lock_holders({{1, running}}), "");
  for (pid_t pid : {running_pid, stopped_pid}) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }

  const std::string exits = stuck_report(4, "shm", "fi_tsenddata", 2, 4600ms, "rank 2 (pid 9) is stopped", true);
  EXPECT_NE(exits.find("rank 4: the shm provider has not returned from fi_tsenddata (peer rank 2) for 4600 ms; on this "
                       "host rank "
                       "2 (pid 9) is stopped: a peer stopped or killed inside the provider keeps a lock"),
            std::string::npos)
      << exits;
  EXPECT_NE(exits.find("exit code 75"), std::string::npos) << exits;
  const std::string waits = stuck_report(0, "shm", "fi_cq_read", -1, 2100ms, "", false);
  EXPECT_NE(waits.find("no peer on this host is stopped or gone"), std::string::npos) << waits;
  EXPECT_NE(waits.find("waiting on"), std::string::npos) << waits;
}

TEST(provider_watch, a_stuck_call_ends_the_process_with_the_documented_code_and_the_peer_named) {
  auto [stopped_pid, stopped] = spawn_marked_child();
  int status = 0;
  ::kill(stopped_pid, SIGSTOP);
  ASSERT_EQ(::waitpid(stopped_pid, &status, WUNTRACED), stopped_pid);
  const std::vector<std::pair<int, process_mark>> peers{{1, stopped}};
  // Through a real watch, as the endpoint wires it: the call never returns.
  EXPECT_EXIT(
      {
        provider_watch watch(5ms, 50ms, [&](const char* call, int peer, std::chrono::milliseconds inside) {
          report_stuck(0, "shm", call, peer, inside, peers, true);
        });
        watch.call("fi_cq_read", -1, [] {
          for (;;) std::this_thread::sleep_for(1s);
        });
      },
      ::testing::ExitedWithCode(provider_watch::exit_code),
      "rank 0: the shm provider has not returned from fi_cq_read .*rank 1 \\(pid [0-9]+\\) is stopped");
  ::kill(stopped_pid, SIGKILL);
  ::waitpid(stopped_pid, &status, 0);
}

TEST(provider_watch, told_to_wait_it_reports_and_the_call_goes_on) {
  testing::internal::CaptureStderr();
  report_stuck(2, "tcp", "fi_cq_read", -1, 2500ms, {}, false);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("rank 2: the tcp provider has not returned from fi_cq_read for 2500 ms"), std::string::npos) << err;
}

}  // namespace
