// p2p batches that cannot run end in a clear error, quickly, on every rank they name: ops
// the peer's batch lacks (tag, count, dtype, a missing op) are a `mismatch` on both ranks,
// found when the second side comes, not at the deadline; a peer that never calls is a
// `timeout` that says so; a refused batch (a bad argument) fails its peers at once; and
// misuse is an `invalid_argument` naming the rank, the op, the peer and the tag.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <latch>
#include <optional>
#include <string>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/p2p.hpp"
#include "mimatrix/transport/inproc.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using transport::inproc;
using coll_t = collectives<inproc>;

struct outcome {
  std::error_code code;
  std::string message;
};

/// Runs body(rank, coll) on p ranks with a deadline of `timeout`; what each rank threw, and
/// how long the slowest took.
template <class Body>
std::pair<std::vector<std::optional<outcome>>, std::chrono::milliseconds> run_ranks(
    int p, Body body, std::chrono::milliseconds timeout = 20s) {
  std::vector<std::optional<outcome>> results(p);
  const auto began = std::chrono::steady_clock::now();
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    comm.set_timeout(timeout);
    coll_t coll(comm);
    try {
      body(r, coll);
    } catch (const error& e) {
      results[r] = outcome{e.code(), e.what()};
    }
  });
  return {results, std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began)};
}

void expect_failed(const std::optional<outcome>& o, int rank, errc code, const std::vector<std::string>& fragments) {
  ASSERT_TRUE(o.has_value()) << "rank " << rank << " did not fail";
  EXPECT_EQ(o->code, code) << "rank " << rank << ": " << o->message;
  for (const auto& f : fragments)
    EXPECT_NE(o->message.find(f), std::string::npos) << "rank " << rank << "'s message lacks '" << f << "': " << o->message;
}

std::vector<float> floats(std::size_t n) { return std::vector<float>(n, 1.5f); }

TEST(p2p_failure, an_unmatched_tag_fails_both_ranks_naming_the_peer_and_the_tags_at_once) {
  auto [results, took] = run_ranks(2, [](int r, coll_t& coll) {
    auto v = floats(100);
    if (r == 0) coll.send(v.data(), 100, dtype::float32, 1, 5).wait();
    else coll.recv(v.data(), 100, dtype::float32, 0, 6).wait();
  });
  expect_failed(results[0], 0, errc::mismatch,
                {"rank 0: p2p batch #0 (batch #0 with rank 1)", "this rank sends tag 5 (100 x float)",
                 "rank 1 receives tag 6 (100 x float) that this rank does not send"});
  expect_failed(results[1], 1, errc::mismatch,
                {"rank 1: p2p batch #0 (batch #0 with rank 0)", "rank 0 sends tag 5 (100 x float)",
                 "this rank receives tag 6"});
  EXPECT_LT(took, 2s);  // a tenth of the deadline
}

TEST(p2p_failure, a_count_or_dtype_that_differs_fails_both_ranks) {
  for (bool by_type : {false, true}) {
    auto [results, took] = run_ranks(2, [&](int r, coll_t& coll) {
      std::vector<std::int32_t> v(100);
      if (r == 0) coll.send(v.data(), 100, dtype::int32, 1, 7).wait();
      else coll.recv(v.data(), by_type ? 100 : 99, by_type ? dtype::float32 : dtype::int32, 0, 7).wait();
    });
    const std::string theirs = by_type ? "tag 7 (100 x float)" : "tag 7 (99 x int32)";
    expect_failed(results[0], 0, errc::mismatch, {"rank 1 receives " + theirs + " where this rank sends tag 7 (100 x int32)"});
    expect_failed(results[1], 1, errc::mismatch, {"rank 0 sends tag 7 (100 x int32) where this rank receives " + theirs});
    EXPECT_LT(took, 2s);
  }
}

TEST(p2p_failure, a_missing_op_fails_both_ranks_and_a_third_rank_of_the_batch) {
  std::latch failed(2);  // rank 2 comes after: a side that completed before the failure is not failed
  auto [results, took] = run_ranks(3, [&](int r, coll_t& coll) {
    auto a = floats(4), b = floats(4), c = floats(4);
    p2p_batch batch;
    if (r == 0) batch.send(a.data(), 4, dtype::float32, 1, 5).send(b.data(), 4, dtype::float32, 1, 5).recv(c.data(), 4, dtype::float32, 2);
    if (r == 1) batch.recv(a.data(), 4, dtype::float32, 0, 5);
    if (r == 2) {
      failed.wait();
      batch.send(c.data(), 4, dtype::float32, 0);
      coll.start(batch).wait();
      return;
    }
    const struct ended {  // failed or not (a defect): rank 2 must not wait forever
      std::latch& l;
      ~ended() { l.count_down(); }
    } done{failed};
    coll.start(batch).wait();
  });
  expect_failed(results[0], 0, errc::mismatch, {"this rank sends tag 5 (#1 of it, 4 x float) that rank 1 does not receive"});
  expect_failed(results[1], 1, errc::mismatch, {"rank 0 sends tag 5 (#1 of it, 4 x float) that this rank does not receive"});
  // Rank 2's side with rank 0 agrees, but rank 0's batch failed as a whole.
  ASSERT_TRUE(results[2].has_value());
  EXPECT_NE(results[2]->message.find("failed on another rank"), std::string::npos) << results[2]->message;
  EXPECT_LT(took, 2s);
}

TEST(p2p_failure, a_peer_that_never_calls_is_named_at_the_deadline) {
  auto [results, took] = run_ranks(
      2,
      [](int r, coll_t& coll) {
        auto v = floats(3);
        if (r == 0) {
          coll.send(v.data(), 3, dtype::float32, 1).wait();  // batch #0 with rank 1: it comes
          coll.send(v.data(), 3, dtype::float32, 1).wait();  // batch #1: it never does
        } else {
          coll.recv(v.data(), 3, dtype::float32, 0).wait();
        }
      },
      300ms);
  expect_failed(results[0], 0, errc::timeout,
                {"timed out", "rank 1 has not started its batch #1 with this rank (it has started 1 with this rank)"});
  EXPECT_FALSE(results[1].has_value()) << results[1]->message;
  EXPECT_LT(took, 5s);
}

TEST(p2p_failure, a_refused_batch_fails_its_peers_at_once) {
  auto [results, took] = run_ranks(3, [](int r, coll_t& coll) {
    auto v = floats(3), w = floats(3);
    p2p_batch batch;
    if (r == 0) batch.send(v.data(), 3, dtype::float32, 1).send(w.data(), 3, dtype::float32, 2, 70000);
    else batch.recv(v.data(), 3, dtype::float32, 0);
    coll.start(batch).wait();
  });
  expect_failed(results[0], 0, errc::invalid_argument,
                {"rank 0, p2p batch #0: op 1 (send to rank 2, tag 70000): tag 70000 is above 65534"});
  for (int r : {1, 2}) expect_failed(results[r], r, errc::invalid_argument, {"failed on another rank: rank 0, p2p batch #0"});
  EXPECT_LT(took, 2s);
}

TEST(p2p_failure, a_send_to_itself_without_its_receive_is_a_mismatch_its_peer_hears_of) {
  auto [results, took] = run_ranks(2, [](int r, coll_t& coll) {
    auto v = floats(3), w = floats(3);
    p2p_batch batch;
    if (r == 0) batch.send(v.data(), 3, dtype::float32, 0, 4).send(w.data(), 3, dtype::float32, 1);
    else batch.recv(w.data(), 3, dtype::float32, 0);
    coll.start(batch).wait();
  });
  expect_failed(results[0], 0, errc::mismatch, {"a send to itself with tag 4 (3 x float) meets no receive from itself"});
  expect_failed(results[1], 1, errc::mismatch, {"failed on another rank: rank 0"});
  EXPECT_LT(took, 2s);
}

/// What one rank's call threw: invalid_argument expected.
template <class Call>
std::string misuse(Call call) {
  auto [results, took] = run_ranks(1, [&](int, coll_t& coll) { call(coll); });
  if (!results[0]) return "nothing thrown";
  EXPECT_EQ(results[0]->code, errc::invalid_argument) << results[0]->message;
  return results[0]->message;
}

TEST(p2p_failure, misuse_is_an_invalid_argument_naming_the_rank_the_op_the_peer_and_the_tag) {
  float x[8] = {};
  const auto has = [](const std::string& message, const std::string& words) {
    EXPECT_NE(message.find(words), std::string::npos) << message;
  };
  has(misuse([&](coll_t& c) { c.send(x, 1, dtype::float32, 1, 3).wait(); }),
      "rank 0, p2p batch #0: op 0 (send to rank 1, tag 3): peer 1 is outside a group of 1");
  has(misuse([&](coll_t& c) { c.recv(nullptr, 2, dtype::float32, 0, 3).wait(); }),
      "op 0 (recv from rank 0, tag 3): a null buffer with count 2");
  has(misuse([&](coll_t& c) {
        c.start(p2p_batch().send(x, 4, dtype::float32, 0).recv(x + 2, 4, dtype::float32, 0).recv(x + 6, 2, dtype::float32, 0))
            .wait();
      }),
      "op 1 (recv from rank 0, tag 0) at");
  has(misuse([&](coll_t& c) { c.start(p2p_batch().recv(x, 4, dtype::float32, 0, 1).recv(x + 3, 1, dtype::float32, 0, 2)).wait(); }),
      "overlaps op 0 (recv from rank 0, tag 1)");
  has(misuse([&](coll_t& c) { c.group_end().wait(); }), "rank 0: group_end() without group_start()");
  has(misuse([&](coll_t& c) {
        c.group_start();
        c.allreduce(x, x, 1, dtype::float32, reduce::op_kind::sum).wait();
      }),
      "a collective inside group_start()/group_end()");
  has(misuse([&](coll_t& c) {
        c.group_start();
        c.start(p2p_batch().send(x, 1, dtype::float32, 0).recv(x + 1, 1, dtype::float32, 0)).wait();
      }),
      "start(p2p_batch) inside group_start()/group_end()");
  call_options tagged;
  tagged.tag = 3;
  has(misuse([&](coll_t& c) { c.send(x, 1, dtype::float32, 0, 0, tagged).wait(); }), "call_options::tag (3) is for collectives");
  call_options pinned;
  pinned.algorithm = "ring";
  has(misuse([&](coll_t& c) { c.start(p2p_batch().send(x, 1, dtype::float32, 0), pinned).wait(); }),
      "call_options::algorithm ('ring') is for collectives");
}

TEST(p2p_failure, a_deadline_of_its_own_applies) {
  auto [results, took] = run_ranks(2, [](int r, coll_t& coll) {
    auto v = floats(1);
    call_options quick;
    quick.timeout = 200ms;
    if (r == 0) coll.recv(v.data(), 1, dtype::float32, 1, 0, quick).wait();  // rank 1 never sends
  });
  expect_failed(results[0], 0, errc::timeout, {"timed out after 200 ms", "rank 1 has not started its batch #0"});
  EXPECT_LT(took, 5s);
}

}  // namespace
}  // namespace mimatrix
