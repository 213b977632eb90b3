// Misuse of reduce, gather, scatter and alltoall and of the v-forms across processes: ranks that give a call
// different counts or roots fail with `mismatch` naming both sides within the deadline,
// every rank, and never return a wrong result. Over shm and tcp;ofi_rxm, 2 and 3 ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "multi_process.hpp"
#include "outcomes.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;
using test::caught_ms;
using test::outcome;
using test::printed;
constexpr int timeout_ms = 3000;

/// MIMATRIX_TEST_CALL names the call and MIMATRIX_TEST_MISUSE what the last rank gives
/// otherwise ("count" or "root"); then an allreduce. Each prints FIRST, NEXT and ASYNC.
MIMATRIX_SCENARIO(rooted_misuse) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::milliseconds(timeout_ms));
  collectives<fabric> coll(comm);
  const int r = comm.rank(), p = comm.size();
  const std::string call = std::getenv("MIMATRIX_TEST_CALL"), misuse = std::getenv("MIMATRIX_TEST_MISUSE");
  const bool odd = r == p - 1;
  const std::size_t n = 1024 + (odd && misuse == "count" ? 1 : 0);
  const int root = odd && misuse == "root" ? p - 1 : 0;
  std::vector<std::int32_t> in(std::size_t(p) * n, r + 1), out(std::size_t(p) * n);
  std::printf("FIRST %s\n", outcome([&] {
                if (call == "reduce")
                  coll.reduce(in.data(), out.data(), n, dtype::int32, reduce::op_kind::sum, root).wait();
                if (call == "gather") coll.gather(in.data(), out.data(), n, dtype::int32, root).wait();
                if (call == "scatter") coll.scatter(in.data(), out.data(), n, dtype::int32, root).wait();
                if (call == "alltoall") coll.alltoall(in.data(), out.data(), n, dtype::int32).wait();
                // The v-forms: the last rank counts its own block (its block for rank 0) one more.
                const std::size_t base = 1024;
                std::vector<std::size_t> all(std::size_t(p), base), mine = all;
                mine[std::size_t(odd ? r : 0)] = n;
                if (call == "gatherv") coll.gatherv(in.data(), n, out.data(), all, {}, dtype::int32, 0).wait();
                if (call == "scatterv") coll.scatterv(in.data(), all, {}, out.data(), n, dtype::int32, 0).wait();
                if (call == "allgatherv") coll.allgatherv(in.data(), n, out.data(), odd ? mine : all, {}, dtype::int32).wait();
                if (call == "reduce_scatter_v")
                  coll.reduce_scatter_v(in.data(), out.data(), odd ? mine : all, dtype::int32, reduce::op_kind::sum).wait();
                if (call == "alltoallv") {
                  std::vector<std::size_t> sent = all;
                  if (odd) sent[0] = base + 1;
                  coll.alltoallv(in.data(), sent, {}, out.data(), all, {}, dtype::int32).wait();
                }
              }).c_str());
  std::int32_t one = 1, sum = 0;
  std::printf("NEXT %s\n", outcome([&] {
                coll.allreduce(&one, &sum, 1, dtype::int32, reduce::op_kind::sum).wait();
                if (sum != p) throw error(errc::transport, "WRONG sum " + std::to_string(sum));
              }).c_str());
  const auto late = comm.async_error();
  std::printf("ASYNC %s\n", late ? late->code().message().c_str() : "none");
  std::fflush(stdout);
  return 0;
}

class rooted_misuse : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

// Every rank fails with mismatch, in the call or at the latest in the next one, within
// the deadline (plus the time to tell the others), and no rank sees a wrong sum.
TEST_P(rooted_misuse, fails_every_rank_with_mismatch) {
  const auto& [call, misuse] = GetParam();
  for (const char* provider : {"shm", "tcp;ofi_rxm"})
    for (int ranks : {2, 3}) {
      SCOPED_TRACE(call + " " + misuse + ", " + provider + ", " + std::to_string(ranks) + " ranks");
      const auto r = test::run_ranks(ranks, provider, "rooted_misuse",
                                     {{"MIMATRIX_TEST_CALL", call}, {"MIMATRIX_TEST_MISUSE", misuse}});
      ASSERT_EQ(r.exit_code, 0) << test::all_output(r);
      const std::string mismatch = "ranks disagree on the collective";
      for (int rank = 0; rank < ranks; ++rank) {
        const std::string first = printed(r, rank, "FIRST "), next = printed(r, rank, "NEXT ");
        const std::string& told = first == "FIRST OK" ? next : first;
        EXPECT_NE(told.find(mismatch), std::string::npos) << "rank " << rank << "\n" << test::all_output(r);
        if (told.find(mismatch) != std::string::npos) {
          EXPECT_LT(caught_ms(told), timeout_ms + 2000) << told;
        }
        EXPECT_EQ(r.output[std::size_t(rank)].find("WRONG"), std::string::npos) << test::all_output(r);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(calls, rooted_misuse,
                         ::testing::Values(std::tuple<std::string, std::string>{"reduce", "count"},
                                           std::tuple<std::string, std::string>{"gather", "count"},
                                           std::tuple<std::string, std::string>{"alltoall", "count"},
                                           std::tuple<std::string, std::string>{"reduce", "root"},
                                           std::tuple<std::string, std::string>{"gather", "root"},
                                           std::tuple<std::string, std::string>{"scatter", "root"},
                                           std::tuple<std::string, std::string>{"gatherv", "count"},
                                           std::tuple<std::string, std::string>{"scatterv", "count"},
                                           std::tuple<std::string, std::string>{"allgatherv", "count"},
                                           std::tuple<std::string, std::string>{"reduce_scatter_v", "count"},
                                           std::tuple<std::string, std::string>{"alltoallv", "count"}),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

}  // namespace
}  // namespace mimatrix
