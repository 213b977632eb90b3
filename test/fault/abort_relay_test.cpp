// A failure that reaches one rank reaches all: every rank passes an abort on, because the
// link from the rank that found the failure may be the broken one (tcp;ofi_rxm drops a
// connection whose message was longer than the receive posted for it).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "mimatrix/bootstrap/env.hpp"
#include "mimatrix/bootstrap/rendezvous.hpp"
#include "mimatrix/transport/fabric/endpoint.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using clock_type = std::chrono::steady_clock;
constexpr std::uint64_t failed_call = 7;
const std::string cause = "rank 2 found the failure";

/// Rank 2 tells rank 0 alone that call 7 failed; every other rank must learn it.
MIMATRIX_SCENARIO(abort_told_to_one_rank) {
  const bootstrap::identity id = bootstrap::identity_from_environment();
  const std::shared_ptr<bootstrap::store> store = bootstrap::open_store(id, std::chrono::seconds(30));
  const char* provider = std::getenv("MIMATRIX_PROVIDER");
  transport::detail::fabric::endpoint ep(id, store, {.provider = provider ? provider : "", .window_bytes = 0});
  const auto until = clock_type::now() + std::chrono::seconds(5);
  if (id.rank == 2) {  // the endpoint's goodbye progresses the send until everyone is done
    ep.send_abort(0, failed_call, errc::mismatch, cause, until);
    return 0;
  }
  while (!ep.failure(failed_call) && clock_type::now() < until)
    if (!ep.progress()) std::this_thread::yield();
  const transport::detail::fabric::failure* f = ep.failure(failed_call);
  if (!f) return std::printf("rank %d never heard of the failure\n", id.rank), 1;
  if (f->code != errc::mismatch || f->message != cause)
    return std::printf("rank %d heard '%s'\n", id.rank, f->message.c_str()), 1;
  std::printf("HEARD %s\n", f->message.c_str());
  return 0;
}

class abort_relay : public ::testing::TestWithParam<std::string> {};

TEST_P(abort_relay, an_abort_told_to_one_rank_reaches_every_rank) {
  const auto r = test::run_ranks(4, GetParam(), "abort_told_to_one_rank");
  ASSERT_EQ(r.exit_code, 0) << test::all_output(r);
  for (int rank : {0, 1, 3}) EXPECT_NE(r.output[std::size_t(rank)].find("HEARD " + cause), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(over, abort_relay, ::testing::ValuesIn(test::test_providers()),
                         [](const auto& info) { return test::provider_label(info.param); });

}  // namespace
}  // namespace mimatrix
