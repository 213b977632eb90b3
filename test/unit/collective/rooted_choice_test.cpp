// Reduce, gather, scatter and alltoall: automatic chooses among the algorithms that run
// each by their own cost models and says so; MIMATRIX_ALGO and call_options name them;
// an algorithm that does not run a call, a root outside the group, a buffer of the wrong
// size and an alltoall in place are refused naming the rank and what was wrong.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mimatrix/algorithm/automatic.hpp"
#include "mimatrix/collectives.hpp"
#include "mimatrix/transport/inproc.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using schedule::collective;
using transport::inproc;

schedule::descriptor call(collective kind, int p, std::size_t bytes) { return {kind, p, bytes / 4, 4, 0}; }

TEST(rooted_choice, automatic_takes_trees_for_small_messages_and_bandwidth_for_large) {
  const algorithm::automatic a{algorithm::automatic_settings{}};
  const topology::ring ring;
  EXPECT_EQ(a.decide(ring, call(collective::reduce, 64, 8)).chosen, "binomial");
  EXPECT_EQ(a.decide(ring, call(collective::reduce, 16, 64 << 20)).chosen, "rabenseifner");
  // Linear's exchanges overlap (α + (p-2)g): it wins on small groups, the tree on large.
  EXPECT_EQ(a.decide(ring, call(collective::gather, 64, 64)).chosen, "binomial");
  EXPECT_EQ(a.decide(ring, call(collective::scatter, 64, 64)).chosen, "binomial");
  EXPECT_EQ(a.decide(ring, call(collective::gather, 4, 64)).chosen, "linear");
  EXPECT_EQ(a.decide(ring, call(collective::alltoall, 64, 8)).chosen, "bruck");
  EXPECT_EQ(a.decide(ring, call(collective::alltoall, 64, 64 << 20)).chosen, "pairwise");
  // Only the algorithms that run the call are candidates, each priced.
  const auto d = a.decide(ring, call(collective::reduce, 8, 1024));
  ASSERT_EQ(d.candidates.size(), 3u);
  for (const auto& e : d.candidates) EXPECT_TRUE(e.seconds) << e.algorithm;
  EXPECT_EQ(algorithm::to_string(d).rfind("reduce of 1024 bytes on 8 ranks (topology ring): ", 0), 0u)
      << algorithm::to_string(d);
  // The allreduce's choice is what it was.
  EXPECT_EQ(a.decide(ring, call(collective::allreduce, 4, 8)).chosen, "recursive_doubling");
}

TEST(rooted_choice, rules_name_the_new_calls_and_a_rule_for_every_call_leaves_them_to_the_model) {
  algorithm::automatic a{algorithm::automatic_settings{}};
  a.set_rules(algorithm::selection::parse("reduce@0-1K:linear; alltoall:pairwise; *:ring"));
  EXPECT_EQ(a.decide(topology::ring{}, call(collective::reduce, 8, 512)).chosen, "linear");
  EXPECT_EQ(a.decide(topology::ring{}, call(collective::alltoall, 64, 8)).chosen, "pairwise");
  EXPECT_EQ(a.decide(topology::ring{}, call(collective::gather, 64, 8)).chosen, "binomial");  // '*:ring' left it
  EXPECT_EQ(a.decide(topology::ring{}, call(collective::allreduce, 8, 8)).chosen, "ring");
  a.set_rules(algorithm::selection::parse("gather:pairwise"));
  try {
    (void)a.decide(topology::ring{}, call(collective::gather, 8, 8));
    ADD_FAILURE() << "a rule naming an algorithm that does not run gather chose it";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("'pairwise' (gather:pairwise) does not run gather; those that do here: "
                                         "binomial, linear"),
              std::string::npos)
        << e.what();
  }
}

/// What `body` threw on each rank ("" where it returned).
template <class Body>
std::vector<std::string> errors_of(int p, Body body) {
  std::vector<std::string> what(std::size_t(p), "");
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    comm.set_timeout(std::chrono::seconds(20));
    collectives<inproc> coll(comm);
    try {
      body(r, coll);
    } catch (const error& e) {
      what[std::size_t(r)] = e.what();
    }
  });
  return what;
}

TEST(rooted_choice, an_algorithm_named_for_a_call_it_does_not_run_is_refused_on_every_rank) {
  const auto what = errors_of(3, [](int, collectives<inproc>& coll) {
    std::vector<float> in(4), out(4);
    call_options o;
    o.algorithm = "ring";
    coll.reduce(in.data(), out.data(), 4, dtype::float32, reduce::op_kind::sum, 0, o).wait();
  });
  for (const std::string& w : what) EXPECT_NE(w.find("'ring'"), std::string::npos) << w;
  for (const std::string& w : what) EXPECT_NE(w.find("does not run reduce"), std::string::npos) << w;
}

TEST(rooted_choice, bad_roots_sizes_and_an_alltoall_in_place_are_named_with_the_rank) {
  auto what = errors_of(3, [](int, collectives<inproc>& coll) {
    std::vector<float> in(4), out(12);
    coll.gather(in.data(), out.data(), 4, dtype::float32, 3).wait();
  });
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(what[std::size_t(r)].find("root 3 is outside a group of 3"), std::string::npos) << what[std::size_t(r)];
  what = errors_of(2, [](int, collectives<inproc>& coll) {
    std::vector<std::int32_t> both(8);
    coll.alltoall(both.data(), both.data(), 4, dtype::int32).wait();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(what[std::size_t(r)].find("rank"), std::string::npos) << what[std::size_t(r)];
    EXPECT_NE(what[std::size_t(r)].find("alltoall never runs in place"), std::string::npos) << what[std::size_t(r)];
  }
  what = errors_of(2, [](int r, collectives<inproc>& coll) {
    std::vector<std::int32_t> in(8), out(8);
    coll.scatter(r == 1 ? nullptr : in.data(), out.data(), 4, dtype::int32, 1).wait();
  });
  EXPECT_NE(what[1].find("rank 1"), std::string::npos) << what[1];
  EXPECT_NE(what[1].find("the input is a null pointer"), std::string::npos) << what[1];
  EXPECT_FALSE(what[0].empty()) << "rank 0 was not told";
}

}  // namespace
}  // namespace mimatrix
