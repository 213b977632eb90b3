// Ranks that build one collective with different parameters (a ring's order, a node
// size, a chunk) fail the call with mismatch at once, naming the disagreement; ranks that
// spell the same parameters differently run as one. Found by a black-box test: the first
// timed out at the deadline, each rank waiting for messages its peers never sent.
#include "mimatrix/allreduce.hpp"
#include "mimatrix/broadcast.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "mimatrix/algorithm/hierarchical.hpp"
#include "mimatrix/algorithm/hdrm.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/collectives.hpp"
#include "mimatrix/topology/bigraph.hpp"
#include "mimatrix/topology/hierarchical.hpp"
#include "mimatrix/transport/inproc.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using transport::inproc;
using hier = topology::hierarchical<topology::ring, topology::ring>;

/// On each of `p` ranks, `check(rank, sum)` with the collective `make(rank, comm)` builds.
template <class Make, class Check>
void on_each_rank(int p, Make make, Check check) {
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    comm.set_timeout(60s);
    auto sum = make(r, comm);
    check(r, sum);
  });
}

/// Every rank must fail with mismatch naming other parameters, well before the deadline.
template <class Make>
void expect_disagreement(int p, Make make) {
  on_each_rank(p, make, [](int r, auto& sum) {
    std::vector<std::int32_t> v(1000, r);
    const auto start = std::chrono::steady_clock::now();
    try {
      sum(v);
      ADD_FAILURE() << "rank " << r << ": collectives built differently ran as one call";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::mismatch) << e.what();
      EXPECT_NE(std::string(e.what()).find("with other parameters than rank"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 30s) << "rank " << r << " waited for the deadline";
  });
}

/// Every rank sums exactly.
template <class Make>
void expect_sums(int p, Make make) {
  on_each_rank(p, make, [p](int r, auto& sum) {
    std::vector<std::int32_t> v(1000, r + 1);
    sum(v);
    for (auto x : v) ASSERT_EQ(x, p * (p + 1) / 2) << "rank " << r;
  });
}

TEST(agreement, ranks_on_rings_of_different_orders_fail_with_mismatch) {
  expect_disagreement(4, [](int r, communicator<inproc>& comm) {
    return allreduce<inproc, topology::ring, reduce::sum<std::int32_t>>(
        comm, r == 2 ? topology::ring({0, 2, 1, 3}) : topology::ring{});
  });
}

// A broadcast's root is what its fabric packing carries; the board compares the agreement.
TEST(agreement, a_broadcast_on_rings_of_different_orders_fails_with_mismatch) {
  struct from_rank_0 {
    broadcast<inproc, topology::ring, std::int32_t> bcast;
    void operator()(std::vector<std::int32_t>& v) { bcast(v, 0); }
  };
  expect_disagreement(3, [](int r, communicator<inproc>& comm) {
    return from_rank_0{broadcast<inproc, topology::ring, std::int32_t>(
        comm, r == 0 ? topology::ring{} : topology::ring({0, 2, 1}))};
  });
}

TEST(agreement, ranks_on_nodes_of_different_sizes_fail_with_mismatch) {
  expect_disagreement(4, [](int r, communicator<inproc>& comm) {
    return allreduce<inproc, hier, reduce::sum<std::int32_t>, algorithm::hierarchical<>>(comm, hier(r == 0 ? 4 : 2));
  });
}

TEST(agreement, ranks_with_different_chunks_fail_with_mismatch) {
  expect_disagreement(3, [](int r, communicator<inproc>& comm) {
    return allreduce<inproc, topology::ring, reduce::sum<std::int32_t>, algorithm::ring>(
        comm, {}, algorithm::ring(algorithm::policy{r == 1 ? 512u : 1024u}));
  });
}

TEST(agreement, one_topology_spelled_two_ways_runs_as_one) {
  expect_sums(4, [](int r, communicator<inproc>& comm) {
    return allreduce<inproc, topology::ring, reduce::sum<std::int32_t>>(
        comm, r == 1 ? topology::ring({0, 1, 2, 3}) : topology::ring{});
  });
  expect_sums(4, [](int r, communicator<inproc>& comm) {
    return allreduce<inproc, hier, reduce::sum<std::int32_t>, algorithm::hierarchical<>>(
        comm, r == 3 ? hier(std::vector<std::string>{"a", "a", "b", "b"}) : hier(2));
  });
  expect_sums(8, [](int r, communicator<inproc>& comm) {
    return allreduce<inproc, topology::bigraph, reduce::sum<std::int32_t>, algorithm::hdrm>(
        comm, r == 5 ? topology::bigraph(4, 2) : topology::bigraph{});
  });
}

TEST(agreement, the_communicator_goes_on_after_a_disagreement) {
  transport::run_inproc(3, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    std::vector<std::int32_t> v(100, 1);
    allreduce<inproc, topology::ring, reduce::sum<std::int32_t>> odd(comm, r == 0 ? topology::ring({0, 2, 1})
                                                                                  : topology::ring{});
    EXPECT_THROW(odd(v), error);
    allreduce<inproc, topology::ring, reduce::sum<std::int32_t>> sum(comm);
    std::vector<std::int32_t> again(100, 1);
    sum(again);
    EXPECT_EQ(again[99], 3) << "rank " << r;
  });
}

// Issue 53 item 1: a broadcast's root enters the history every later call carries; where
// the broadcast failed on every rank (here, in process, at entry) it leaves it again, so
// the communicator goes on as after any disagreement. One root taken back, the later calls
// still carry the roots of the broadcasts that ran: a second broadcast, then an allreduce.
TEST(agreement, the_communicator_goes_on_after_a_broadcast_whose_roots_disagreed) {
  transport::run_inproc(3, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    std::vector<std::int32_t> v(100, r);
    EXPECT_THROW(coll.broadcast(v.data(), v.data(), v.size(), dtype::int32, r == 2 ? 2 : 0).wait(), error);
    std::vector<std::int32_t> b(100, r + 10);
    coll.broadcast(b.data(), b.data(), b.size(), dtype::int32, 1).wait();
    EXPECT_EQ(b[99], 11) << "rank " << r;
    std::vector<std::int32_t> again(100, 1);
    coll.allreduce(again.data(), again.data(), again.size(), dtype::int32, reduce::op_kind::sum).wait();
    EXPECT_EQ(again[99], 3) << "rank " << r;
  });
}

}  // namespace
}  // namespace mimatrix
