// What a survivor is told when a rank dies under many calls in flight across hosts: each
// failed call names itself and quotes where the failure began once, not the message of
// every rank and call that passed it on (a black-box test read a trainer's message nested
// four deep, "failed on another rank: rank 0's fabric endpoint was closed after ... (rank
// 0: ... failed on another rank: ...)", with code aborted and the lost rank at its end).
#include "mimatrix/transport/fabric.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;

/// A trainer's step: buckets of gradients allreduced and a few allgathers, all in flight.
std::vector<request> start_a_step(collectives<fabric>& coll, std::vector<std::vector<float>>& buffers, int rank,
                                  int ranks) {
  std::vector<request> calls;
  for (std::size_t k = 0; k < buffers.size(); ++k) {
    std::vector<float>& b = buffers[k];
    const std::size_t share = b.size() / std::size_t(ranks);
    if (k % 2 == 0)
      calls.push_back(coll.allreduce(b.data(), b.data(), b.size(), dtype::float32, reduce::op_kind::sum));
    else  // gathered in place: the rank's share is its part of the output
      calls.push_back(coll.allgather(b.data() + std::size_t(rank) * share, b.data(), share, dtype::float32));
  }
  return calls;
}

// The last rank (host 1's second) dies mid-step; the others run three more steps, each
// call's failure printed as "CAUGHT <code>: <what>".
MIMATRIX_SCENARIO(killed_across_hosts_under_calls_in_flight) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(20));
  collectives<fabric> coll(comm);
  std::vector<std::vector<float>> buffers;
  for (std::size_t count : {1u << 18, 8000u, 1u << 16, 512u, 37992u, 4000u}) buffers.emplace_back(count, 1.0f);
  for (request& call : start_a_step(coll, buffers, comm.rank(), comm.size())) call.wait();
  test::wait_until_the_others_finished(comm, "messages.first_step");
  if (comm.rank() == comm.size() - 1) {
    auto calls = start_a_step(coll, buffers, comm.rank(), comm.size());
    for (request& call : calls) (void)call.test();
    ::kill(::getpid(), SIGKILL);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  int caught = 0;
  for (int step = 0; step < 3; ++step)
    for (request& call : start_a_step(coll, buffers, comm.rank(), comm.size())) try {
        call.wait();
      } catch (const error& e) {
        std::printf("CAUGHT %s: %s\n", e.code().message().c_str(), e.what());
        ++caught;
      }
  if (caught == 0) return std::printf("rank %d: no call failed\n", comm.rank()), 1;
  return 0;
}

std::size_t occurrences(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

TEST(failure_messages, a_rank_lost_across_hosts_is_quoted_once_in_every_survivors_failures) {
  constexpr int ranks = 4, victim = ranks - 1;
  const auto r = test::run_ranks(ranks, "tcp;ofi_rxm", "killed_across_hosts_under_calls_in_flight", {},
                                 std::chrono::seconds(60), 2);
  ASSERT_FALSE(r.timed_out) << test::all_output(r);
  for (int rank = 0; rank < victim; ++rank) {
    const std::string& out = r.output[std::size_t(rank)];
    EXPECT_EQ(r.status[std::size_t(rank)], 0) << test::all_output(r);
    std::size_t lines = 0;
    for (std::size_t at = out.find("CAUGHT "); at != std::string::npos; at = out.find("CAUGHT ", at + 1)) {
      const std::string line = out.substr(at, out.find('\n', at) - at);
      ++lines;
      EXPECT_EQ(line.rfind("CAUGHT peer lost: rank " + std::to_string(rank), 0), 0u) << line;
      const std::string lost = "rank " + std::to_string(victim);  // the cause
      EXPECT_GE(occurrences(line, lost + " (pid ") + occurrences(line, lost + " (host ") +
                    occurrences(line, lost + " is unreachable"),
                1u)
          << line;
      EXPECT_LE(occurrences(line, " failed on another rank: "), 1u) << line;
      EXPECT_LE(occurrences(line, " failed after an earlier failure on this rank: "), 1u) << line;
      EXPECT_LE(occurrences(line, "fabric endpoint was closed"), 1u) << line;
      EXPECT_LE(occurrences(line, "aborted the communicator"), 0u) << line;
    }
    EXPECT_EQ(lines, 18u) << out;  // three steps of six calls, each failed
  }
}

}  // namespace MIMATRIX_UNIT_ID
}  // namespace mimatrix
