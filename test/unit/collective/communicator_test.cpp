// communicator: a second thread that starts a call while another thread's calls are in
// flight gets a clear error, not silently crossed buffers; handing a communicator over
// between threads stays allowed; a collective object kept past its communicator refuses;
// reading the sequence number changes nothing.
#include "mimatrix/communicator.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/collectives.hpp"
#include "mimatrix/reduce_scatter.hpp"
#include "mimatrix/transport/inproc.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using transport::inproc;
using sum_t = allreduce<inproc, topology::ring, reduce::sum<std::int64_t>>;

TEST(communicator, a_second_thread_starting_while_calls_are_in_flight_is_refused) {
  std::atomic<bool> refused{false};
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    comm.set_timeout(10s);
    sum_t sum(comm);
    std::vector<std::int64_t> a(1000, r + 1), b(1000, 7);
    if (r == 0) {
      auto pending = sum.start(a);  // in flight until rank 1 joins
      std::thread other([&] {
        try {
          (void)sum.start(b);
        } catch (const error& e) {
          refused = e.code() == errc::invalid_argument &&
                    std::string(e.what()).find("rank 0: a second thread started a collective") != std::string::npos;
        }
      });
      other.join();
      pending.wait();
    } else {
      while (!refused.load()) std::this_thread::sleep_for(1ms);
      sum(a);
    }
    EXPECT_EQ(a[0], 3) << "rank " << r;
  });
  EXPECT_TRUE(refused.load());
}

TEST(communicator, another_thread_may_take_over_once_the_calls_are_done) {
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    sum_t sum(comm);
    std::vector<std::int64_t> v(100, 1);
    sum(v);
    std::thread([&] { sum(v); }).join();
    sum(v);
    EXPECT_EQ(v[0], 8);
  });
}

// Regression (issue 18 item 7): a deadline of milliseconds::max() overflowed the clock
// and failed the first call that waited, at once.
TEST(communicator, the_longest_timeout_means_never_not_an_overflow) {
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    comm.set_timeout(std::chrono::milliseconds::max());
    EXPECT_EQ(comm.settings().timeout, max_timeout);
    sum_t sum(comm);
    std::vector<std::int64_t> v(1000, r + 1);
    if (r == 1) std::this_thread::sleep_for(50ms);  // rank 0 waits, so its deadline is computed
    sum(v);
    EXPECT_EQ(v[999], 3) << "rank " << r;
  });
}

// Regression (issue 53 item 3): next_sequence() used a number up, so reading it on one
// rank shifted its calls against the others' (over fabric: a timeout 5 s later blaming
// rank 0). Reading is free now, and each request keeps its call's number.
TEST(communicator, reading_the_sequence_changes_nothing_and_each_request_keeps_its_own) {
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    comm.set_timeout(3s);
    sum_t sum(comm);
    std::vector<std::int64_t> v(100, r + 1);
    sum(v);
    if (r == 0) {
      for (int k = 0; k < 3; ++k) EXPECT_EQ(comm.next_sequence(), 1u);
    }
    auto second = sum.start(v);
    EXPECT_EQ(second.sequence(), 1u) << "rank " << r;
    EXPECT_EQ(comm.next_sequence(), 2u) << "rank " << r;
    second.wait();
    EXPECT_EQ(second.sequence(), 1u) << "rank " << r;  // kept after the wait
    EXPECT_EQ(v[99], 6) << "rank " << r;               // (1 + 2) summed twice
  });
}

/// Sets `name`=`value`, makes a communicator on each of 2 ranks, and expects each to
/// refuse it with invalid_argument, starting with its rank and naming the variable.
void expect_refused_naming_the_rank(const char* name, const char* value) {
  ::setenv(name, value, 1);
  std::atomic<int> named{0};
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    try {
      communicator<inproc> comm(w, r);
      ADD_FAILURE() << "rank " << r << " accepted " << name << "=" << value;
    } catch (const error& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.code(), errc::invalid_argument) << what;
      EXPECT_EQ(what.rfind("rank " + std::to_string(r) + ": ", 0), 0u) << what;
      EXPECT_NE(what.find(name), std::string::npos) << what;
      ++named;
    }
  });
  ::unsetenv(name);
  EXPECT_EQ(named.load(), 2);
}

// A malformed setting in the environment was refused without saying on which rank.
TEST(communicator, a_malformed_setting_in_the_environment_is_named_with_the_rank) {
  expect_refused_naming_the_rank("MIMATRIX_TIMEOUT_MS", "soon");
}

// Found by a black-box test: a malformed MIMATRIX_ALGO failed at a first automatic call,
// naming no rank. Now the communicator refuses it, as the other settings.
TEST(communicator, a_malformed_algorithm_rule_is_named_with_the_rank_when_the_communicator_is_made) {
  expect_refused_naming_the_rank("MIMATRIX_ALGO", "allreduce@:ring");
}

// A collectives object or a typed collective kept past its communicator refuses its calls
// with an error naming the rank and the call; before, they read the freed communicator.
TEST(communicator, a_collective_object_kept_past_its_communicator_refuses_its_calls) {
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    std::optional<communicator<inproc>> comm(std::in_place, w, r);
    collectives<inproc> coll(*comm);
    sum_t sum(*comm);
    reduce_scatter<inproc, topology::ring, reduce::sum<std::int64_t>> scatter(*comm);
    std::vector<std::int64_t> v(64, r + 1);
    sum(v);
    ASSERT_EQ(v[0], 3) << "rank " << r;
    comm.reset();
    const std::string refused = "rank " + std::to_string(r) + ": ";
    const auto expect_refused = [&](const char* call, auto&& start) {
      try {
        start();
        ADD_FAILURE() << call << " on rank " << r << " was not refused";
      } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument) << call;
        EXPECT_NE(std::string(e.what()).find(refused + call + " on a communicator that has been destroyed"),
                  std::string::npos)
            << e.what();
      }
    };
    expect_refused("allreduce", [&] { (void)coll.allreduce(v.data(), v.data(), v.size(), dtype::int64, reduce::op_kind::sum); });
    expect_refused("broadcast", [&] { (void)coll.broadcast(v.data(), v.data(), v.size(), dtype::int64, 0); });
    expect_refused("allreduce", [&] { coll.barrier(); });
    expect_refused("allreduce", [&] { (void)sum.start(v); });
    expect_refused("reduce_scatter", [&] { (void)scatter.start(v); });  // in place: reads the group's size
    EXPECT_EQ(v[0], 3) << "a refused call wrote the buffer";
  });
}

// Found by a black-box test: with 3 ranks or more, communicators made and ended in a loop
// on one world failed within a few rounds: a rank's next communicator joined call #0
// while a slower peer was still leaving the last one's call #0, and the two shared one
// entry of the world's board, so every rank timed out saying the others never called.
TEST(communicator, communicators_made_and_ended_in_a_loop_on_one_world_stay_exact) {
  for (int p : {3, 4})
    transport::run_inproc(p, [&](int r, inproc::world& w) {
      for (std::int64_t round = 0; round < 150; ++round) {
        communicator<inproc> comm(w, r);
        comm.set_timeout(10s);
        sum_t sum(comm);
        std::vector<std::int64_t> v(1000, round * 100 + r);
        sum(v);
        ASSERT_EQ(v[999], p * round * 100 + p * (p - 1) / 2) << "rank " << r << " of " << p << ", round " << round;
      }
    });
}

// Several communicators open at once on one world, opened in one order on every rank, run
// their calls apart: each one's call #0 is its own.
TEST(communicator, communicators_open_at_once_on_one_world_keep_their_calls_apart) {
  transport::run_inproc(3, [&](int r, inproc::world& w) {
    communicator<inproc> first(w, r), second(w, r);
    first.set_timeout(10s);
    second.set_timeout(10s);
    sum_t a(first), b(second);
    std::vector<std::int64_t> x(500, 1), y(500, 10 + r);
    auto later = b.start(y);  // second's call #0 before first's
    a(x);
    later.wait();
    EXPECT_EQ(x[499], 3) << "rank " << r;
    EXPECT_EQ(y[0], 33) << "rank " << r;
  });
}

}  // namespace
}  // namespace mimatrix
