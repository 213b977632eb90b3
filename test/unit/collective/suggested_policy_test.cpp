// A transport's suggested policy (transport::suggests_policy) reaches the algorithms the
// collectives build with, defaults and automatic's candidates included, and never
// overrides a chunk the user set. A recording transport keeps the schedule it is given.
#include "mimatrix/allreduce.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "mimatrix/algorithm/automatic.hpp"
#include "mimatrix/algorithm/hierarchical.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/topology/hierarchical.hpp"
#include "mimatrix/topology/ring.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

/// Finishes at once; the test looks only at the schedule.
struct finished : mimatrix::detail::operation {
  bool test(std::error_code& ec) override { return ec.clear(), true; }
  void wait(std::error_code& ec) override { ec.clear(); }
  const std::string& message() const override { return text; }
  std::string text;
};

/// Rank 0 of 8, suggesting `suggestion`; keeps the last schedule it was asked to run.
struct recording_transport {
  algorithm::policy suggestion;
  std::shared_ptr<const schedule::schedule>* last;

  int rank() const { return 0; }
  int size() const { return 8; }
  algorithm::policy suggested_policy() const { return suggestion; }
  std::unique_ptr<mimatrix::detail::operation> start(std::shared_ptr<const schedule::schedule> plan, const std::byte*,
                                                     std::byte*, const signature&, const reduce::host_kernels&,
                                                     std::chrono::milliseconds) {
    *last = std::move(plan);
    return std::make_unique<finished>();
  }
  void fail(const signature&, errc, const std::string&) {}
};
static_assert(transport::backend<recording_transport> && transport::suggests_policy<recording_transport>);

/// The largest message of a schedule, in bytes.
std::size_t largest_message(const schedule::schedule& s) {
  std::size_t most = 0;
  for (const auto& st : s.steps)
    if (schedule::is_communication(st.kind)) most = std::max(most, st.bytes());
  return most;
}

/// The largest message of one allreduce of 8 ranks x 1000 floats (1000-byte blocks).
template <class Topology, class Algorithm>
std::size_t largest_with(std::size_t suggested, Topology topo, Algorithm algo) {
  std::shared_ptr<const schedule::schedule> plan;
  communicator<recording_transport> comm(algorithm::policy{suggested}, &plan);
  allreduce<recording_transport, Topology, reduce::sum<float>, Algorithm> sum(comm, std::move(topo), std::move(algo));
  std::vector<float> data(8 * 250);
  sum(data);
  return plan ? largest_message(*plan) : 0;
}

TEST(suggested_policy, sets_the_chunk_of_an_algorithm_that_leaves_it_open) {
  EXPECT_EQ(largest_with(96, topology::ring{}, algorithm::ring{}), 96u);
  EXPECT_EQ(largest_with(0, topology::ring{}, algorithm::ring{}), 1000u) << "no suggestion: one 1000-byte chunk a block";
}

TEST(suggested_policy, never_overrides_a_chunk_the_user_set) {
  EXPECT_EQ(largest_with(96, topology::ring{}, algorithm::ring(algorithm::policy{200})), 200u);
}

TEST(suggested_policy, reaches_the_phases_of_hierarchical_left_to_the_topology_default) {
  using hier = topology::hierarchical<topology::ring, topology::ring>;
  // Two nodes of four: the local phases move quarters of the 8000 bytes, the global one
  // halves of a quarter.
  EXPECT_EQ(largest_with(96, hier(4), algorithm::hierarchical<>{}), 96u);
  EXPECT_EQ(largest_with(0, hier(4), algorithm::hierarchical<>{}), 2000u);
}

TEST(suggested_policy, reaches_the_candidates_of_automatic) {
  algorithm::automatic_settings pinned;
  pinned.rules = algorithm::selection::parse("allreduce:ring");
  EXPECT_EQ(largest_with(96, topology::ring{}, algorithm::automatic(pinned)), 96u);
  pinned.rules = algorithm::selection::parse("allreduce:halving_doubling");
  EXPECT_EQ(largest_with(96, topology::ring{}, algorithm::automatic(pinned)), 96u);
}

}  // namespace
}  // namespace mimatrix
