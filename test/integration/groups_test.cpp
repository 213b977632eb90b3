// Groups over one store: split(color, key) as MPI_Comm_split, overlapping groups, and
// groups named by hand. A process may belong to several groups; each group's ranks meet
// under its own keys, whatever other groups each process opened before.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/bootstrap/env.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;
using sum_t = allreduce<fabric, topology::ring, reduce::sum<std::int64_t>>;

/// Allreduces `value` over `comm` and checks the sum against `want`; prints what differs.
int sums_to(communicator<fabric>& comm, std::int64_t value, std::int64_t want, const char* what) {
  sum_t sum(comm);
  std::vector<std::int64_t> data(3000, value);
  sum(data);
  for (std::int64_t v : data)
    if (v != want) return std::printf("%s: rank %d got %lld want %lld\n", what, comm.rank(), (long long)v, (long long)want), 1;
  return 0;
}

MIMATRIX_SCENARIO(split_by_parity) {
  communicator<fabric> world;
  const int r = world.rank(), p = world.size();
  // Color by parity, keys reversed: the highest rank of each color comes first.
  auto part = world.split(r % 2, -r);
  if (!part) return std::printf("rank %d: no part\n", r), 1;
  const int members = (p - r % 2 + 1) / 2;
  const int expected_rank = members - 1 - r / 2;
  if (part->rank() != expected_rank || part->size() != members)
    return std::printf("rank %d: part rank %d of %d, want %d of %d\n", r, part->rank(), part->size(), expected_rank,
                       members), 1;
  const auto id = part->transport().identity();
  if (id.local_size != members || id.local_rank != expected_rank)  // every rank runs on this host
    return std::printf("rank %d: local %d of %d\n", r, id.local_rank, id.local_size), 1;
  if (part->settings().timeout != world.settings().timeout) return std::printf("rank %d: timeout not kept\n", r), 1;
  std::int64_t want = 0;
  for (int q = r % 2; q < p; q += 2) want += q + 1;
  if (sums_to(*part, r + 1, want, "parity part")) return 1;
  // The parent goes on, and splits again: one color, ranks kept in order.
  if (sums_to(world, 1, p, "world after the split")) return 1;
  auto whole = world.split(0, r);
  if (!whole || whole->rank() != r || whole->size() != p) return std::printf("rank %d: second split\n", r), 1;
  if (sums_to(*whole, r, std::int64_t(p) * (p - 1) / 2, "second split")) return 1;
  // Node-local: every rank runs on this host. Cross-node: color by local rank, one a host.
  auto local = world.split(fabric::same_host, -r);
  if (!local || local->rank() != p - 1 - r || local->size() != p) return std::printf("rank %d: same_host\n", r), 1;
  if (sums_to(*local, 2, 2 * p, "same_host")) return 1;
  auto across = world.split(world.transport().identity().local_rank, 0);
  if (!across || across->size() != 1 || across->rank() != 0) return std::printf("rank %d: across\n", r), 1;
  std::printf("SPLIT OK\n");
  return 0;
}

// The case a process-wide key counter got wrong: process 0 is in {0,1} and then {0,2},
// process 2 only in {0,2}, process 1 only in {0,1}.
MIMATRIX_SCENARIO(overlapping_splits) {
  communicator<fabric> world;
  const int r = world.rank();
  auto first = world.split(r <= 1 ? 0 : -1, r);
  auto second = world.split(r == 0 || r == 2 ? 0 : -1, r);
  if (first.has_value() != (r <= 1) || second.has_value() != (r == 0 || r == 2))
    return std::printf("rank %d: wrong membership\n", r), 1;
  if (first && sums_to(*first, r + 1, 1 + 2, "{0,1}")) return 1;
  if (second && sums_to(*second, r + 1, 1 + 3, "{0,2}")) return 1;
  std::printf("OVERLAP OK\n");
  return 0;
}

// Groups built by hand over the world's store, each named: process 0 opens "pair01" and
// then "pair02"; process 2 opens only "pair02".
MIMATRIX_SCENARIO(named_groups) {
  communicator<fabric> world;
  const int r = world.rank();
  const auto store = world.transport().store();
  const auto pair = [&](int rank_in_pair, const char* name) {
    bootstrap::identity id;
    id.rank = rank_in_pair;
    id.size = 2;
    id.local_rank = rank_in_pair;
    id.local_size = 2;
    // Named alone, as docs/bootstrap.md does: no field may lack a default (-Wextra).
    return communicator<fabric>(id, store, transport::fabric_options{.group = name});
  };
  if (r <= 1) {
    communicator<fabric> a = pair(r, "pair01");
    if (sums_to(a, r + 1, 3, "pair01")) return 1;
  }
  if (r == 0 || r == 2) {
    communicator<fabric> b = pair(r == 0 ? 0 : 1, "pair02");
    if (sums_to(b, r + 1, 4, "pair02")) return 1;
  }
  std::printf("NAMED OK\n");
  return 0;
}

class groups : public ::testing::TestWithParam<std::string> {
 protected:
  void expect_every_rank(int ranks, const std::string& scenario, const std::string& ok) const {
    test::expect_every_rank(ranks, GetParam(), scenario, ok);
  }
};

TEST_P(groups, split_ranks_by_key_and_each_part_reduces_exactly_while_the_parent_goes_on) {
  expect_every_rank(4, "split_by_parity", "SPLIT OK");
}

// Regression (issue 11 item 1): both groups timed out with a process-wide key counter.
TEST_P(groups, a_process_in_two_overlapping_parts_meets_each_under_its_own_keys) {
  expect_every_rank(3, "overlapping_splits", "OVERLAP OK");
}

TEST_P(groups, groups_named_by_hand_meet_whatever_else_each_process_opened) {
  expect_every_rank(3, "named_groups", "NAMED OK");
}

INSTANTIATE_TEST_SUITE_P(over, groups, ::testing::ValuesIn(test::test_providers()),
                         [](const auto& info) { return test::provider_label(info.param); });

}  // namespace
}  // namespace mimatrix
