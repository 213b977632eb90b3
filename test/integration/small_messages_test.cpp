// Small messages between ranks on one host through the shared-memory mailboxes
// (transport/fabric/mailbox.hpp) instead of the provider: exact results when small and
// large messages mix in one call, a mismatch seen through a mailbox, and a killed rank
// named while its peers wait on a mailbox.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "mimatrix/algorithm/recursive_doubling.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allgather.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;

std::int32_t value(int r, std::size_t i, int k) { return std::int32_t((i * 13 + std::size_t(r) * 7 + std::size_t(k)) % 101); }

/// Allreduces every count from 1 to 200 (all through mailboxes), then counts whose ring
/// chunks straddle the 512-byte slot (some steps by mailbox, some by the provider).
template <class Algorithm>
int mixed_sizes(communicator<fabric>& comm, const Algorithm& algo) {
  allreduce<fabric, topology::ring, reduce::sum<std::int32_t>, Algorithm> sum(comm, topology::ring{}, algo);
  const int p = comm.size();
  int wrong = 0;
  std::vector<std::size_t> counts;
  for (std::size_t n = 1; n <= 200; ++n) counts.push_back(n);
  for (std::size_t n : {std::size_t(128) * std::size_t(p) - 1, std::size_t(128) * std::size_t(p) + 1,
                        std::size_t(1000), std::size_t(65537)})
    counts.push_back(n);
  int k = 0;
  for (std::size_t n : counts) {
    ++k;
    std::vector<std::int32_t> data(n);
    for (std::size_t i = 0; i < n; ++i) data[i] = value(comm.rank(), i, k);
    sum(data);
    for (std::size_t i = 0; i < n; ++i) {
      std::int32_t want = 0;
      for (int r = 0; r < p; ++r) want += value(r, i, k);
      if (data[i] != want) {
        if (wrong++ == 0)
          std::fprintf(stderr, "rank %d: count %zu element %zu is %d, expected %d\n", comm.rank(), n, i, data[i], want);
        break;
      }
    }
  }
  return wrong;
}

MIMATRIX_SCENARIO(mixed_sizes) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(30));
  int wrong = comm.transport().uses_mailboxes() ? 0 : 1;
  if (wrong) std::fprintf(stderr, "rank %d: no mailboxes\n", comm.rank());
  wrong += mixed_sizes(comm, algorithm::ring{}) + mixed_sizes(comm, algorithm::recursive_doubling{});
  allgather<fabric, topology::ring, std::int32_t> gather(comm);
  std::vector<std::int32_t> mine(3, comm.rank()), all(3 * std::size_t(comm.size()));
  gather(mine, all);
  for (std::size_t i = 0; i < all.size(); ++i) wrong += all[i] == std::int32_t(i / 3) ? 0 : 1;
  if (wrong == 0) std::printf("rank %d: small messages exact\n", comm.rank());
  return wrong ? 1 : 0;
}

/// Rank 1 allreduces 8 elements, the others 7: both fit a slot, so the mismatch is seen
/// in the mailbox's immediate data.
MIMATRIX_SCENARIO(small_mismatch) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(3));
  allreduce<fabric, topology::ring, reduce::sum<std::int32_t>, algorithm::recursive_doubling> sum(comm);
  std::vector<std::int32_t> data(comm.rank() == 1 ? 8 : 7, 1);
  try {
    sum(data);
  } catch (const error& e) {
    std::printf("CAUGHT %s: %s\n", e.code().message().c_str(), e.what());
    return 0;
  }
  return 1;
}

/// The last rank dies before a small call; the others wait on their mailboxes and must
/// name it by the liveness probe, within the deadline.
MIMATRIX_SCENARIO(small_killed) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(3));
  allreduce<fabric, topology::ring, reduce::sum<std::int32_t>> sum(comm);
  std::vector<std::int32_t> data(5, 1);
  sum(data);
  test::wait_until_the_others_finished(comm, "small_killed.first_call");
  if (comm.rank() == comm.size() - 1) ::kill(::getpid(), SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    sum(data);
  } catch (const error& e) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    std::printf("CAUGHT %s %lld: %s\n", e.code().message().c_str(), static_cast<long long>(ms.count()), e.what());
    return 0;
  }
  return 1;
}

class small_messages : public ::testing::TestWithParam<std::string> {
 protected:
  bootstrap::launch_result run(int ranks, const std::string& scenario) const {
    return test::run_ranks(ranks, GetParam(), scenario, {{"MIMATRIX_MAILBOX", "on"}});
  }
};

TEST_P(small_messages, are_exact_whether_they_go_by_mailbox_or_provider) {
  for (int ranks : {2, 3, 4}) {
    const auto r = run(ranks, "mixed_sizes");
    EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
    for (int rank = 0; rank < ranks; ++rank)
      EXPECT_NE(r.output[std::size_t(rank)].find("small messages exact"), std::string::npos) << test::all_output(r);
  }
}

TEST_P(small_messages, a_mismatch_through_a_mailbox_fails_with_mismatch) {
  const auto r = run(3, "small_mismatch");
  EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  bool names_rank_1 = false;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_NE(r.output[std::size_t(rank)].find("CAUGHT ranks disagree on the collective"), std::string::npos)
        << test::all_output(r);
    names_rank_1 |= r.output[std::size_t(rank)].find("count 8") != std::string::npos;
  }
  EXPECT_TRUE(names_rank_1) << test::all_output(r);
}

TEST_P(small_messages, a_killed_peer_is_named_while_waiting_on_a_mailbox) {
  constexpr int ranks = 3;
  const auto r = run(ranks, "small_killed");
  ASSERT_FALSE(r.timed_out) << test::all_output(r);
  for (int rank = 0; rank < ranks - 1; ++rank) {
    const std::string& out = r.output[std::size_t(rank)];
    EXPECT_NE(out.find("CAUGHT peer lost"), std::string::npos) << test::all_output(r);
    // By its process's end (on this host), or by the liveness probe.
    EXPECT_TRUE(out.find("rank 2 (pid ") != std::string::npos || out.find("rank(s) 2") != std::string::npos)
        << test::all_output(r);
  }
}

INSTANTIATE_TEST_SUITE_P(over, small_messages, ::testing::ValuesIn(test::test_providers()),
                         [](const auto& info) { return test::provider_label(info.param); });

}  // namespace
}  // namespace mimatrix
