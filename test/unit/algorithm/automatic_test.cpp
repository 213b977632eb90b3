#include "mimatrix/algorithm/automatic.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "mimatrix/allreduce.hpp"
#include "mimatrix/transport/inproc.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

// Set before main so that the first read of MIMATRIX_DEBUG sees it: the decisions this
// binary makes are printed, as a user would see them.
const bool debug_info = (::setenv("MIMATRIX_DEBUG", "INFO", 1), true);

using schedule::collective;
using transport::inproc;

/// Stand-ins for algorithms the model knows by name: they build (correct) ring
/// schedules, labelled with their own name so the test can see which one ran.
template <class Named>
struct stand_in {
  static constexpr std::string_view name = Named::value;
  schedule::schedule build(const topology::ring& topo, const schedule::descriptor& d, int rank) const {
    auto s = algorithm::ring().build(topo, d, rank);
    s.algorithm = name;
    return s;
  }
};
struct rd_name { static constexpr std::string_view value = "recursive_doubling"; };
struct hd_name { static constexpr std::string_view value = "halving_doubling"; };
using recursive_doubling = stand_in<rd_name>;
using halving_doubling = stand_in<hd_name>;

/// A topology the ring algorithm cannot run on, and a candidate only for it.
struct other_topology {
  static constexpr std::string_view name = "other";
  void check(int) const {}
};
struct gdraa {
  static constexpr std::string_view name = "gdraa";
  schedule::schedule build(const other_topology&, const schedule::descriptor& d, int rank) const {
    return algorithm::ring().build({}, d, rank);
  }
};

using three = algorithm::basic_automatic<algorithm::ring, recursive_doubling, halving_doubling, gdraa>;

static_assert(algorithm::builds_for<algorithm::automatic, topology::ring>);
static_assert(algorithm::builds_for<three, other_topology>);
static_assert(!algorithm::builds_for<algorithm::basic_automatic<algorithm::ring>, other_topology>,
              "automatic runs only where one of its candidates does");
static_assert(algorithm::automatic::name == "automatic");

schedule::descriptor allreduce_of(int p, std::size_t bytes) { return {collective::allreduce, p, bytes / 4, 4, 0}; }

three with_rules(std::string_view rules) {
  algorithm::automatic_settings settings;
  settings.rules = algorithm::selection::parse(rules);
  return three(settings);
}

TEST(automatic, the_ring_only_automatic_runs_allreduce_with_exact_sums) {
  for (int p : {1, 2, 3, 4, 7})
    transport::run_inproc(p, [&](int r, inproc::world& w) {
      communicator<inproc> comm(w, r);
      allreduce<inproc, topology::ring, reduce::sum<float>, algorithm::automatic> sum(comm);
      allreduce<inproc, topology::ring, reduce::sum<std::int32_t>, algorithm::automatic> isum(comm);
      for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(1000), std::size_t(100003)}) {
        std::vector<float> v(n);
        std::vector<std::int32_t> iv(n);
        for (std::size_t e = 0; e < n; ++e) v[e] = static_cast<float>(r + static_cast<int>(e % 1000));
        for (std::size_t e = 0; e < n; ++e) iv[e] = r * 1000 + static_cast<std::int32_t>(e);
        sum(v);
        isum(iv);
        for (std::size_t e = 0; e < n; ++e) {
          ASSERT_EQ(v[e], static_cast<float>(p * static_cast<int>(e % 1000) + p * (p - 1) / 2))
              << "p=" << p << " n=" << n << " rank " << r << " element " << e;
          ASSERT_EQ(iv[e], 1000 * p * (p - 1) / 2 + p * static_cast<std::int32_t>(e)) << "p=" << p << " n=" << n;
        }
      }
    });
}

TEST(automatic, picks_the_cheapest_candidate_for_each_size) {
  const three a{algorithm::automatic_settings{}};
  EXPECT_EQ(three::candidates_for<topology::ring>(),
            (std::vector<std::string_view>{"ring", "recursive_doubling", "halving_doubling"}));
  EXPECT_EQ(a.decide(topology::ring{}, allreduce_of(4, 8)).chosen, "recursive_doubling");
  EXPECT_EQ(a.decide(topology::ring{}, allreduce_of(4, 64 << 20)).chosen, "halving_doubling");
  // Folding 2 extra ranks costs halving-doubling more than ring's extra start-ups.
  EXPECT_EQ(a.decide(topology::ring{}, allreduce_of(6, 64 << 20)).chosen, "ring");

  const auto d = a.decide(topology::ring{}, allreduce_of(16, 8));
  EXPECT_EQ(d.why, algorithm::decision::reason::model);
  ASSERT_EQ(d.candidates.size(), 3u);
  for (const auto& e : d.candidates)
    EXPECT_EQ(e.seconds, model::predict(e.algorithm, model::network{}, collective::allreduce, 16, 8)) << e.algorithm;
  EXPECT_EQ(d.predicted(), model::recursive_doubling(model::network{}, collective::allreduce, 16, 8));

  // The choice is what builds the schedule.
  EXPECT_EQ(a.build(topology::ring{}, allreduce_of(4, 8), 0).algorithm, "recursive_doubling");
  EXPECT_EQ(a.build(topology::ring{}, allreduce_of(4, 64 << 20), 3).algorithm, "halving_doubling");
  EXPECT_EQ(a.build(topology::ring{}, allreduce_of(6, 64 << 20), 5).algorithm, "ring");
  EXPECT_EQ(a.build(other_topology{}, allreduce_of(4, 8), 0).algorithm, "ring");  // gdraa, built as a ring
  EXPECT_EQ(a.decide(other_topology{}, allreduce_of(4, 8)).chosen, "gdraa");
}

TEST(automatic, every_rank_makes_the_same_choice) {
  const three a{algorithm::automatic_settings{}};
  for (int p : {2, 5, 8, 12})
    for (std::size_t bytes = 4; bytes <= (std::size_t(1) << 28); bytes *= 9) {
      const auto first = a.build(topology::ring{}, allreduce_of(p, bytes), 0).algorithm;
      for (int r = 1; r < p; ++r) EXPECT_EQ(a.build(topology::ring{}, allreduce_of(p, bytes), r).algorithm, first);
    }
}

TEST(automatic, a_rule_overrides_the_model_in_its_range) {
  const three a = with_rules("allreduce@0-8K:ring");
  const auto small = a.decide(topology::ring{}, allreduce_of(4, 8));
  EXPECT_EQ(small.chosen, "ring");
  EXPECT_EQ(small.why, algorithm::decision::reason::override);
  EXPECT_EQ(small.rule, "allreduce@0-8K:ring");
  EXPECT_EQ(a.build(topology::ring{}, allreduce_of(4, 8), 1).algorithm, "ring");
  const auto large = a.decide(topology::ring{}, allreduce_of(4, 64 << 20));
  EXPECT_EQ(large.chosen, "halving_doubling");
  EXPECT_EQ(large.why, algorithm::decision::reason::model);

  three b{algorithm::automatic_settings{}};
  b.set_rules(algorithm::selection::parse("*:recursive_doubling"));
  EXPECT_EQ(b.decide(topology::ring{}, allreduce_of(4, 64 << 20)).chosen, "recursive_doubling");
}

TEST(automatic, mimatrix_algo_is_read_once_at_construction) {
  ::setenv("MIMATRIX_ALGO", "allreduce:ring", 1);
  const three a;
  ::setenv("MIMATRIX_ALGO", "allreduce:recursive_doubling", 1);
  EXPECT_EQ(a.decide(topology::ring{}, allreduce_of(4, 64 << 20)).chosen, "ring");
  ::setenv("MIMATRIX_ALGO", "allreduce@:ring", 1);
  EXPECT_THROW(three{}, error);
  ::unsetenv("MIMATRIX_ALGO");
  EXPECT_TRUE(three{}.settings().rules.empty());
}

TEST(automatic, a_rule_naming_an_algorithm_that_cannot_run_here_lists_the_ones_that_can) {
  for (std::string_view rules : {"broadcast:gdraa", "allreduce@1M-:ring; allreduce:bogus"}) {
    const three a = with_rules(rules);
    try {
      (void)a.decide(topology::ring{}, allreduce_of(4, 8));
      ADD_FAILURE() << rules;
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      const std::string what = e.what();
      EXPECT_NE(what.find("topology ring; expected one of: ring, recursive_doubling, halving_doubling"),
                std::string::npos) << what;
      EXPECT_NE(what.find("MIMATRIX_ALGO: rule"), std::string::npos) << what;
    }
  }
  EXPECT_EQ(with_rules("broadcast:gdraa").decide(other_topology{}, allreduce_of(4, 8)).chosen, "gdraa");
}

TEST(automatic, the_decision_prints_its_choice_reason_and_predictions) {
  const three a = with_rules("allreduce@64M:ring");
  const std::string by_model = algorithm::to_string(a.decide(topology::ring{}, allreduce_of(4, 8)));
  EXPECT_EQ(by_model.rfind("allreduce of 8 bytes on 4 ranks (topology ring): recursive_doubling, cheapest by the cost model; "
                           "predicted ring ", 0), 0u) << by_model;
  EXPECT_NE(by_model.find(" us, recursive_doubling 10 us*, halving_doubling 20 us"), std::string::npos) << by_model;
  const std::string by_rule = algorithm::to_string(a.decide(topology::ring{}, allreduce_of(4, 64 << 20)));
  EXPECT_NE(by_rule.find(": ring, MIMATRIX_ALGO rule 'allreduce@64M:ring'; predicted ring 12.6 ms*"), std::string::npos)
      << by_rule;
  std::printf("%s\n%s\n", by_model.c_str(), by_rule.c_str());
}

// On device memory that every rank reaches, every rank is a neighbour of every other and
// memory traffic decides: every collective takes GDRAA's one pass a rank (an allreduce's
// 2p buffers, where the ring makes 2.5p), on the user's topology too. A rule for the call,
// one rank, the collectives other than allreduce on two, and an automatic without GDRAA
// choose as on host memory.
TEST(automatic, device_memory_every_rank_reaches_takes_gdraas_one_pass) {
  ::unsetenv("MIMATRIX_ALGO");
  const algorithm::automatic a{algorithm::automatic_settings{}};
  for (std::size_t bytes : {std::size_t(8), std::size_t(64) << 20}) {
    const auto d = a.decide_on_shared_device(topology::ring{}, allreduce_of(4, bytes));
    EXPECT_EQ(d.chosen, "gdraa") << bytes;
    EXPECT_EQ(d.why, algorithm::decision::reason::memory) << bytes;
    EXPECT_NE(a.decide(topology::ring{}, allreduce_of(4, bytes)).chosen, "gdraa") << "gdraa does not run on a ring";
    for (int r = 0; r < 4; ++r) {
      const schedule::schedule s = a.build_on_shared_device(topology::ring{}, allreduce_of(4, bytes), r);
      EXPECT_EQ(s.algorithm, "gdraa") << bytes;
      EXPECT_EQ(s.rank, r);
    }
  }
  EXPECT_EQ(algorithm::to_string(a.decide_on_shared_device(topology::ring{}, allreduce_of(4, 8))),
            "allreduce of 8 bytes on 4 ranks (topology mesh): gdraa, the least memory traffic on device memory "
            "every rank reaches");

  // Reduce-scatter and allgather take GDRAA's pass too, built with both synchronizations
  // (gdraa::build_on_shared_device): four waits' worth of flags where build() has one.
  const schedule::descriptor scatter{collective::reduce_scatter, 4, 1000, 4, 0};
  const schedule::descriptor gather{collective::allgather, 4, 1000, 4, 0};
  const schedule::descriptor cast{collective::broadcast, 4, 1000, 4, 2};
  for (const auto& d : {scatter, gather, cast}) {
    EXPECT_EQ(a.decide_on_shared_device(topology::ring{}, d).chosen, "gdraa") << schedule::to_string(d.kind);
    EXPECT_EQ(a.decide_on_shared_device(topology::ring{}, d).why, algorithm::decision::reason::memory);
    const schedule::schedule s = a.build_on_shared_device(topology::ring{}, d, 2);
    EXPECT_EQ(s.algorithm, "gdraa");
    std::vector<std::uint32_t> waited;
    for (const schedule::step& st : s.steps)
      if (st.kind == schedule::step_kind::wait) waited.push_back(st.tag);
    const std::vector<std::uint32_t> both{algorithm::gdraa::sync_1, algorithm::gdraa::sync_2};
    // A broadcast's root (rank 2 here) waits for sync 1 alone.
    EXPECT_EQ(waited, d.kind == collective::broadcast ? std::vector<std::uint32_t>{algorithm::gdraa::sync_1} : both)
        << schedule::to_string(d.kind);
    EXPECT_NE(a.decide(topology::ring{}, d).chosen, "gdraa");
  }
  // On two ranks the ring's reduce-scatter, allgather and broadcast are one step, the pass
  // two synchronizations: the same traffic, or a quarter less for allgather.
  const schedule::descriptor scatter_2{collective::reduce_scatter, 2, 1 << 20, 4, 0};
  const schedule::descriptor gather_2{collective::allgather, 2, 1 << 20, 4, 0};
  const schedule::descriptor cast_2{collective::broadcast, 2, 1 << 20, 4, 1};
  for (const auto& d : {allreduce_of(1, 4096), scatter_2, gather_2, cast_2}) {
    EXPECT_EQ(a.decide_on_shared_device(topology::ring{}, d).chosen, a.decide(topology::ring{}, d).chosen);
    EXPECT_EQ(a.decide_on_shared_device(topology::ring{}, d).why, algorithm::decision::reason::model);
  }

  algorithm::automatic ruled{algorithm::automatic_settings{}};
  ruled.set_rules(algorithm::selection::parse("allreduce@0-8K:ring"));
  EXPECT_EQ(ruled.decide_on_shared_device(topology::ring{}, allreduce_of(4, 8)).chosen, "ring");
  EXPECT_EQ(ruled.build_on_shared_device(topology::ring{}, allreduce_of(4, 8), 1).algorithm, "ring");
  EXPECT_EQ(ruled.decide_on_shared_device(topology::ring{}, allreduce_of(4, 64 << 20)).chosen, "gdraa");

  // A rule no candidate can run fails the first call on device memory too.
  algorithm::automatic typo{algorithm::automatic_settings{}};
  typo.set_rules(algorithm::selection::parse("broadcast:bogus"));
  EXPECT_THROW((void)typo.decide_on_shared_device(topology::ring{}, allreduce_of(4, 8)), error);

  const algorithm::basic_automatic<algorithm::ring, recursive_doubling> without{algorithm::automatic_settings{}};
  EXPECT_EQ(without.decide_on_shared_device(topology::ring{}, allreduce_of(4, 8)).chosen, "recursive_doubling");
  EXPECT_EQ(without.build_on_shared_device(topology::ring{}, allreduce_of(4, 64 << 20), 0).algorithm, "ring");
}

/// A candidate the model does not know, which predicts its own time.
struct priced {
  static constexpr std::string_view name = "priced";
  std::optional<double> predict(const model::network&, const schedule::descriptor&) const { return 0.0; }
  schedule::schedule build(const topology::ring& t, const schedule::descriptor& d, int rank) const {
    return algorithm::ring().build(t, d, rank);
  }
};

TEST(automatic, a_candidate_may_price_itself) {
  const algorithm::basic_automatic<algorithm::ring, priced> a{algorithm::automatic_settings{}};
  EXPECT_EQ(a.decide(topology::ring{}, allreduce_of(4, 8)).chosen, "priced");
  EXPECT_EQ(algorithm::basic_automatic<priced>{algorithm::automatic_settings{}}
                .decide(topology::ring{}, allreduce_of(4, 8)).predicted(), 0.0);
}

TEST(automatic, collectives_print_the_decision_with_mimatrix_debug_info) {
  ASSERT_TRUE(debug_info);
  ASSERT_TRUE(log_enabled(log_level::info));
  testing::internal::CaptureStderr();
  transport::run_inproc(3, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    allreduce<inproc, topology::ring, reduce::sum<std::int32_t>, algorithm::automatic> sum(comm);
    std::vector<std::int32_t> v(10, 1);
    sum(v);
    sum(v);  // the schedule is cached: no second line
  });
  const std::string all = testing::internal::GetCapturedStderr();
  // Each communicator says when it opens and closes; the rest is the decision.
  std::string err;
  int opened = 0, closed = 0, progress = 0;
  std::istringstream lines(all);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(": communicator over inproc opened (timeout ") != std::string::npos) ++opened;
    else if (line.find(": communicator closing after 2 call(s)") != std::string::npos) ++closed;
    else if (line.find(": calls from #0 on run with progress caller") != std::string::npos) ++progress;
    else err += line + "\n";
  }
  EXPECT_EQ(opened, 3) << all;
  EXPECT_EQ(closed, 3) << all;
  EXPECT_EQ(progress, 3) << all;
  // One line, from rank 0, naming the winner among the candidates that run on a ring
  // (recursive doubling at 40 bytes) with every candidate's predicted time.
  const std::string rd = algorithm::format_seconds(
      *model::predict("recursive_doubling", model::network{}, collective::allreduce, 3, 40));
  EXPECT_EQ(err, "mimatrix INFO rank 0: allreduce of 40 bytes on 3 ranks (topology ring): recursive_doubling, "
                 "cheapest by the cost model; predicted ring " +
                     algorithm::format_seconds(*model::predict("ring", model::network{}, collective::allreduce, 3, 40)) +
                     ", halving_doubling " +
                     algorithm::format_seconds(
                         *model::predict("halving_doubling", model::network{}, collective::allreduce, 3, 40)) +
                     ", recursive_doubling " + rd + "*\n");
}

// Issue 53 item 7: the opening said "progress caller" when set_progress(thread) came at
// once after it; the mode is said where calls run under it, at the first call and at the
// first after a change.
TEST(automatic, the_progress_mode_said_is_the_one_calls_run_under) {
  ASSERT_TRUE(log_enabled(log_level::info));
  testing::internal::CaptureStderr();
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    comm.set_progress(progress_mode::thread);
    allreduce<inproc, topology::ring, reduce::sum<std::int32_t>> sum(comm);
    std::vector<std::int32_t> v(10, 1);
    sum(v);
    sum(v);  // unchanged: said once
    comm.set_progress(progress_mode::caller);
    sum(v);
  });
  const std::string all = testing::internal::GetCapturedStderr();
  const auto said = [&](const std::string& text) {
    int n = 0;
    for (std::size_t at = all.find(text); at != std::string::npos; at = all.find(text, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(said(": calls from #0 on run with progress thread"), 2) << all;
  EXPECT_EQ(said(": calls from #2 on run with progress caller"), 2) << all;
  EXPECT_EQ(said("progress caller)"), 0) << all;  // the opening no longer guesses
  EXPECT_EQ(said("run with progress"), 4) << all;
}

// Issue 11 item 5: a collective whose type fixes the algorithm says which at INFO too,
// once per call shape and from rank 0 only.
TEST(automatic, a_fixed_algorithm_is_named_at_info_once_per_shape) {
  testing::internal::CaptureStderr();
  transport::run_inproc(3, [](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    allreduce<inproc, topology::ring, reduce::sum<std::int32_t>, algorithm::ring> sum(comm);
    std::vector<std::int32_t> v(10, 1);
    sum(v);
    sum(v);
  });
  const std::string all = testing::internal::GetCapturedStderr();
  std::string fixed;
  std::istringstream lines(all);
  for (std::string line; std::getline(lines, line);)
    if (line.find("fixed by") != std::string::npos) fixed += line + "\n";
  EXPECT_EQ(fixed, "mimatrix INFO rank 0: allreduce of 40 bytes on 3 ranks: ring (fixed by the collective's "
                   "Algorithm), " +
                       std::to_string(algorithm::ring().build({}, {.size = 3, .count = 10, .elem_size = 4}, 0).steps.size()) +
                       " steps\n")
      << all;
}

}  // namespace
}  // namespace mimatrix
