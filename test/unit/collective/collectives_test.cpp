// The runtime-typed entry (collectives.hpp): every dtype and op gives the typed façade's
// result bit for bit; algorithms by name; bad values named with the rank; per-call
// deadlines; the barrier.
#include "mimatrix/collectives.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "mimatrix/allreduce.hpp"
#include "mimatrix/transport/inproc.hpp"
#include "support/dtypes.hpp"

namespace mimatrix {
namespace {

using namespace std::chrono_literals;
using transport::inproc;

template <class T>
std::vector<T> values(int rank, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = T(static_cast<float>(1 + (i * 7 + std::size_t(rank) * 3) % 5));
  return v;
}

template <class T, template <class> class Op>
void expect_same_as_typed(reduce::op_kind op) {
  constexpr int p = 3;
  constexpr std::size_t n = 1001;
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    allreduce<inproc, topology::ring, Op<T>> typed(comm);
    const std::vector<T> in = values<T>(r, n);
    std::vector<T> runtime_out(n), typed_out(n);
    coll.allreduce(in.data(), runtime_out.data(), n, dtype_of<T>, op).wait();
    typed(in, typed_out);
    EXPECT_EQ(std::memcmp(runtime_out.data(), typed_out.data(), n * sizeof(T)), 0)
        << to_string(dtype_of<T>) << " " << reduce::to_string(op) << " rank " << r;
  });
}

TEST(collectives, every_dtype_and_op_matches_the_typed_facade_bit_for_bit) {
  for (dtype t : test::all_dtypes)
    test::with_dtype(t, [](auto tag) {
      using T = typename decltype(tag)::type;
      expect_same_as_typed<T, reduce::sum>(reduce::op_kind::sum);
      expect_same_as_typed<T, reduce::prod>(reduce::op_kind::prod);
      expect_same_as_typed<T, reduce::min>(reduce::op_kind::min);
      expect_same_as_typed<T, reduce::max>(reduce::op_kind::max);
      expect_same_as_typed<T, reduce::avg>(reduce::op_kind::avg);
    });
}

TEST(collectives, reduce_scatter_allgather_and_broadcast_count_as_nccl_does) {
  constexpr int p = 4;
  constexpr std::size_t n = 37;
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    std::vector<std::int32_t> whole(n * p), block(n), gathered(n * p), copy(n);
    for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = std::int32_t(i) + r;
    coll.reduce_scatter(whole.data(), block.data(), n, dtype::int32, reduce::op_kind::sum).wait();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(block[i], p * std::int32_t(std::size_t(r) * n + i) + 6);
    coll.allgather(block.data(), gathered.data(), n, dtype::int32).wait();
    for (std::size_t i = 0; i < gathered.size(); ++i) ASSERT_EQ(gathered[i], p * std::int32_t(i) + 6);
    coll.broadcast(r == 2 ? whole.data() : nullptr, copy.data(), n, dtype::int32, 2).wait();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(copy[i], std::int32_t(i) + 2);
  });
}

TEST(collectives, an_algorithm_named_per_call_runs_and_one_that_cannot_is_refused) {
  transport::run_inproc(4, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    std::vector<double> v(100, 1.5);
    coll.allreduce(v.data(), v.data(), v.size(), dtype::float64, reduce::op_kind::sum, {.algorithm = "recursive_doubling", .timeout = {}})
        .wait();
    EXPECT_EQ(v[99], 6.0);
    try {
      (void)coll.allreduce(v.data(), v.data(), v.size(), dtype::float64, reduce::op_kind::sum, {.algorithm = "gdraa", .timeout = {}});
      ADD_FAILURE() << "gdraa ran on a ring";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      const std::string what = e.what();
      EXPECT_NE(what.find("rank " + std::to_string(r) + ": algorithm 'gdraa' does not run"), std::string::npos) << what;
      EXPECT_NE(what.find("ring"), std::string::npos) << what;
    }
    coll.allreduce(v.data(), v.data(), v.size(), dtype::float64, reduce::op_kind::sum).wait();  // still in step
    EXPECT_EQ(v[0], 24.0);
  });
}

TEST(collectives, a_value_outside_the_enums_is_an_invalid_argument_naming_the_rank) {
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    float x = 1;
    for (auto [type, op] : {std::pair{static_cast<dtype>(42), reduce::op_kind::sum},
                            std::pair{dtype::float32, static_cast<reduce::op_kind>(9)}}) {
      try {
        (void)coll.allreduce(&x, &x, 1, type, op);
        ADD_FAILURE() << "accepted";
      } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(r) + ": reduce:"), std::string::npos) << e.what();
      }
    }
  });
}

TEST(collectives, a_per_call_deadline_replaces_the_communicators) {
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    if (r == 1) return;  // never calls
    std::int64_t x = 1;
    std::error_code ec;
    coll.allreduce(&x, &x, 1, dtype::int64, reduce::op_kind::sum, {.algorithm = {}, .timeout = 150ms}).wait(ec);
    EXPECT_EQ(ec, errc::timeout);
  });
}

TEST(collectives, the_barrier_returns_only_after_every_rank_entered) {
  std::atomic<int> entered{0};
  transport::run_inproc(3, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    if (r == 2) std::this_thread::sleep_for(50ms);
    entered.fetch_add(1);
    coll.barrier();
    EXPECT_EQ(entered.load(), 3) << "rank " << r;
  });
}

}  // namespace
}  // namespace mimatrix
