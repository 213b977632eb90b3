// Persistent calls (MPI_Allreduce_init, MPI_Start): planned once, started many times on
// the same buffers, each start a call of its own between fresh ones.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/collectives.hpp"
#include "mimatrix/transport/inproc.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::inproc;

TEST(persistent, each_start_reduces_what_the_buffers_hold_then_between_fresh_calls) {
  constexpr int p = 3;
  constexpr std::size_t n = 513;
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    std::vector<std::int64_t> in(n), out(n), other(n, 1), other_out(n);
    persistent sum = coll.allreduce_init(in.data(), out.data(), n, dtype::int64, reduce::op_kind::sum);
    for (int round = 0; round < 20; ++round) {
      for (std::size_t i = 0; i < n; ++i) in[i] = std::int64_t(i) * (r + 1) + round;
      const std::uint64_t next = comm.next_sequence();
      request started = sum.start();
      EXPECT_EQ(started.sequence(), next);
      EXPECT_EQ(comm.next_sequence(), next + 1);
      started.wait();
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(out[i], std::int64_t(i) * 6 + 3 * round) << "round " << round << " element " << i;
      if (round % 3 == 0) {  // a fresh call between two starts takes its own number
        coll.allreduce(other.data(), other_out.data(), n, dtype::int64, reduce::op_kind::sum).wait();
        ASSERT_EQ(other_out[n - 1], p);
      }
    }
  });
}

TEST(persistent, a_typed_allreduce_prepares_one_too) {
  transport::run_inproc(4, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    allreduce<inproc, topology::ring, reduce::max<float>> max(comm);
    std::vector<float> in(7), out(7);
    persistent call = max.prepare(in, out);
    for (int round = 0; round < 5; ++round) {
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = float(r * 10 + round) + float(i);
      call();
      EXPECT_EQ(out[6], float(30 + round + 6));
    }
  });
}

TEST(persistent, bad_arguments_throw_at_init_naming_the_rank_and_start_no_call) {
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    std::vector<float> v(8);
    const std::uint64_t before = comm.next_sequence();
    try {
      (void)coll.allreduce_init(nullptr, v.data(), v.size(), dtype::float32, reduce::op_kind::sum);
      ADD_FAILURE() << "a null input was taken";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(r)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("null"), std::string::npos) << e.what();
    }
    EXPECT_EQ(comm.next_sequence(), before);
    persistent none;
    EXPECT_FALSE(none.valid());
    EXPECT_THROW((void)none.start(), error);
  });
}

}  // namespace
}  // namespace mimatrix
