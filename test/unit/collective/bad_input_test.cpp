// Bad input and disagreeing ranks: each must end in a clear error on every rank,
// within the deadline, never in a hang or a silently wrong buffer.
#include "mimatrix/allreduce.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/broadcast.hpp"
#include "mimatrix/transport/inproc.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using transport::inproc;
using comm_t = communicator<inproc>;
template <class T> using sum_t = allreduce<inproc, topology::ring, reduce::sum<T>>;

struct outcome {
  std::error_code code;
  std::string message;
};

/// Runs body(rank, comm) on p ranks with a short deadline; what each rank threw.
template <class Body>
std::vector<std::optional<outcome>> run_ranks(int p, Body body, std::chrono::milliseconds timeout = 20s) {
  std::vector<std::optional<outcome>> results(p);
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    comm_t comm(w, r);
    comm.set_timeout(timeout);
    try {
      body(r, comm);
    } catch (const error& e) {
      results[r] = outcome{e.code(), e.what()};
    }
  });
  return results;
}

void expect_everyone_failed(const std::vector<std::optional<outcome>>& results, errc code,
                            const std::vector<std::string>& fragments) {
  for (std::size_t r = 0; r < results.size(); ++r) {
    ASSERT_TRUE(results[r].has_value()) << "rank " << r << " did not fail";
    EXPECT_EQ(results[r]->code, code) << "rank " << r << ": " << results[r]->message;
    for (const auto& f : fragments)
      EXPECT_NE(results[r]->message.find(f), std::string::npos)
          << "rank " << r << "'s message lacks '" << f << "': " << results[r]->message;
  }
}

TEST(bad_input, mismatched_counts_fail_on_every_rank_naming_both_sides) {
  const auto start = std::chrono::steady_clock::now();
  auto results = run_ranks(3, [](int r, comm_t& comm) {
    std::vector<float> v(r == 1 ? 12 : 10, 1.0f);
    sum_t<float>{comm}(v);
  });
  expect_everyone_failed(results, errc::mismatch, {"count 12", "count 10", "rank 1"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "a mismatch must not wait for the deadline";
}

TEST(bad_input, mismatched_dtypes_fail_on_every_rank) {
  auto results = run_ranks(2, [](int r, comm_t& comm) {
    if (r == 0) {
      std::vector<float> v(8);
      sum_t<float>{comm}(v);
    } else {
      std::vector<std::int32_t> v(8);
      sum_t<std::int32_t>{comm}(v);
    }
  });
  expect_everyone_failed(results, errc::mismatch, {"float", "int32"});
}

TEST(bad_input, mismatched_operations_fail_on_every_rank) {
  auto results = run_ranks(4, [](int r, comm_t& comm) {
    std::vector<double> v(100);
    if (r == 2)
      allreduce<inproc, topology::ring, reduce::max<double>>{comm}(v);
    else
      sum_t<double>{comm}(v);
  });
  expect_everyone_failed(results, errc::mismatch, {"max", "sum"});
}

TEST(bad_input, mismatched_collectives_fail_on_every_rank) {
  auto results = run_ranks(3, [](int r, comm_t& comm) {
    std::vector<std::int32_t> v(64);
    if (r == 0)
      broadcast<inproc, topology::ring, std::int32_t>{comm}(v, 0);
    else
      sum_t<std::int32_t>{comm}(v);
  });
  expect_everyone_failed(results, errc::mismatch, {"broadcast", "allreduce"});
}

TEST(bad_input, a_rank_that_never_joins_ends_in_a_timeout_naming_it) {
  const auto start = std::chrono::steady_clock::now();
  auto results = run_ranks(
      3,
      [](int r, comm_t& comm) {
        if (r == 2) return;  // never calls
        std::vector<std::int64_t> v(1000, r);
        sum_t<std::int64_t>{comm}(v);
      },
      300ms);
  EXPECT_FALSE(results[2].has_value());
  for (int r : {0, 1}) {
    ASSERT_TRUE(results[r].has_value()) << "rank " << r;
    EXPECT_EQ(results[r]->code, errc::timeout) << results[r]->message;
    EXPECT_NE(results[r]->message.find("2 never called allreduce #0"), std::string::npos) << results[r]->message;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(bad_input, a_null_buffer_is_rejected_and_the_peers_are_told) {
  auto results = run_ranks(3, [](int r, comm_t& comm) {
    std::vector<float> v(16);
    std::span<float> data = r == 1 ? std::span<float>(static_cast<float*>(nullptr), 16) : std::span<float>(v);
    sum_t<float>{comm}(data);
  });
  expect_everyone_failed(results, errc::invalid_argument, {"rank 1", "null pointer"});
}

TEST(bad_input, overlapping_buffers_that_are_not_in_place_are_rejected) {
  auto results = run_ranks(2, [](int, comm_t& comm) {
    std::vector<std::int32_t> v(17);
    sum_t<std::int32_t>{comm}(std::span<const std::int32_t>(v.data(), 16), std::span<std::int32_t>(v.data() + 1, 16));
  });
  expect_everyone_failed(results, errc::invalid_argument, {"overlaps the output"});
}

TEST(bad_input, wrong_buffer_sizes_are_rejected) {
  auto results = run_ranks(2, [](int, comm_t& comm) {
    std::vector<float> in(10), out(9);
    sum_t<float>{comm}(in, out);
  });
  expect_everyone_failed(results, errc::invalid_argument, {"input holds 10 elements but 9 are needed"});
}

TEST(bad_input, a_root_outside_the_group_is_rejected) {
  auto results = run_ranks(2, [](int, comm_t& comm) {
    std::vector<float> v(4);
    broadcast<inproc, topology::ring, float>{comm}(v, 5);
  });
  expect_everyone_failed(results, errc::invalid_argument, {"root 5 is outside a group of 2"});
}

TEST(bad_input, zero_ranks_and_ranks_outside_the_group_are_rejected) {
  try {
    inproc::world empty(0);
    FAIL() << "a group of zero ranks was accepted";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("at least one rank"), std::string::npos) << e.what();
  }
  inproc::world two(2);
  try {
    comm_t comm(two, 2);
    FAIL() << "rank 2 of a group of 2 was accepted";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("rank 2 is outside a group of 2"), std::string::npos) << e.what();
  }
}

TEST(bad_input, a_ring_order_that_is_not_a_permutation_is_rejected) {
  inproc::world three(3);
  comm_t comm(three, 0);
  EXPECT_THROW((sum_t<float>(comm, topology::ring({0, 1, 1}))), error);
  EXPECT_THROW((sum_t<float>(comm, topology::ring({0, 1}))), error);
}

TEST(bad_input, errors_also_come_back_as_error_codes) {
  auto results = run_ranks(2, [](int r, comm_t& comm) {
    std::vector<float> v(r == 0 ? 5 : 6);
    std::error_code ec;
    sum_t<float>{comm}.start(v).wait(ec);
    if (ec) throw error(ec, "from wait(ec)");
  });
  expect_everyone_failed(results, errc::mismatch, {"from wait(ec)"});
}

TEST(bad_input, a_failed_call_leaves_the_communicator_usable) {
  auto results = run_ranks(3, [](int r, comm_t& comm) {
    sum_t<std::int32_t> sum(comm);
    std::vector<std::int32_t> bad(r == 0 ? 3 : 4, 1);
    EXPECT_THROW(sum(bad), error);
    std::vector<std::int32_t> good(50, r + 1);
    sum(good);
    for (auto x : good) ASSERT_EQ(x, 6) << "rank " << r;
  });
  for (const auto& r : results) EXPECT_FALSE(r.has_value()) << r->message;
}

}  // namespace
}  // namespace mimatrix
