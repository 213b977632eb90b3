// A transfer cut off by a stalled sender must never land in the caller's buffers after
// the call has failed and returned them: over tcp;ofi_rxm a matched receive of a large
// message cannot be cancelled, and the sender, resumed, pushes the rest of it. The
// endpoint is closed instead (endpoint::disable) and later calls fail at once, naming why.
#include "mimatrix/transport/fabric.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allgather.hpp"
#include "mimatrix/topology/ring.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;
constexpr int timeout_ms = 2000;
constexpr int sentinel = 0x5a5a5a5a;

MIMATRIX_SCENARIO(stalled_mid_message) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::milliseconds(timeout_ms));
  allgather<fabric, topology::ring, int> gather(comm);
  const std::size_t n = std::size_t(4) << 20;  // 16 MiB a rank: many segments in flight
  std::vector<int> in(n, comm.rank() + 1), out(2 * n, 0);
  if (comm.rank() == 0) {
    auto pending = gather.start(in, out);
    // A child stops this process mid-transfer, past rank 1's deadline, then resumes it (as
    // SIGSTOP and SIGCONT from outside would): its progress then pushes the rest of the block.
    const pid_t stopper = ::fork();
    if (stopper == 0) {
      ::kill(::getppid(), SIGSTOP);
      ::usleep((timeout_ms + 1500) * 1000);
      ::kill(::getppid(), SIGCONT);
      ::_exit(0);
    }
    try {
      pending.wait();
    } catch (const error&) {
    }
    ::waitpid(stopper, nullptr, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    return 0;
  }
  try {
    gather(in, out);
    std::printf("rank 1: the call succeeded but rank 0 stalled past the deadline\n");
    return 1;
  } catch (const error& e) {
    std::printf("FAILED %s\n", e.what());
  }
  // The caller owns `out` again: nothing may write it from now on, whatever it calls.
  std::fill(out.begin(), out.end(), sentinel);
  std::vector<int> other_in(16, 1), other_out(32, 0);
  std::string later;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms + 2500);
  while (std::chrono::steady_clock::now() < until) {
    try {
      gather(other_in, other_out);  // progresses the endpoint, as any next call would
    } catch (const error& e) {
      later = e.what();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::size_t changed = 0;
  for (int v : out) changed += v != sentinel;
  std::printf("%s %zu\nLATER %s\n", changed ? "CORRUPTED" : "INTACT", changed, later.c_str());
  return changed ? 1 : 0;
}

TEST(cut_transfer, a_stalled_senders_rest_never_lands_in_a_failed_calls_buffers) {
  const auto r = test::run_ranks(2, "tcp;ofi_rxm", "stalled_mid_message");
  ASSERT_FALSE(r.timed_out) << test::all_output(r);
  const std::string& out = r.output[1];
  EXPECT_NE(out.find("FAILED"), std::string::npos) << test::all_output(r);
  EXPECT_NE(out.find("INTACT"), std::string::npos) << test::all_output(r);
  EXPECT_EQ(r.status[1], 0) << test::all_output(r);
  EXPECT_EQ(r.status[0], 0) << test::all_output(r);  // no crash on the resumed rank either
}

}  // namespace
}  // namespace mimatrix
