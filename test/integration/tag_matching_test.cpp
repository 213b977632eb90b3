// A receive takes only the message whose tag it names, also a message that arrived before
// it right after a control message. libfabric 1.17's shm keeps in a receive entry the
// ignore mask of the receive that last used it, and an unexpected message that reuses the
// entry of a wildcard receive then matches any receive posted after it: with control
// receives posted as wildcards, a chunk landed in another chunk's place and the call hung
// (wire::control_tag). Both providers, mailboxes and bulk rings off: every message goes
// through the provider.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using schedule::buffer;
using transport::fabric;
using transport::fabric_options;

constexpr std::size_t half = 64 << 10;  // bytes a message: above every inject size
constexpr std::size_t count = 2 * half / sizeof(std::int32_t);

signature call(std::uint64_t sequence) {
  return {schedule::collective::allreduce, reduce::op_kind::sum, dtype::int32, count, 0, sequence};
}

/// Rank 0 sends its input's halves with tags 1 and 2; rank 1 receives the second half
/// first, then the first. With `warm_up`, one message with tag 0 instead.
std::shared_ptr<const schedule::schedule> plan(int rank, bool warm_up) {
  const schedule::descriptor d{schedule::collective::allreduce, 2, count, sizeof(std::int32_t), 0};
  schedule::builder b(d, rank, "two_halves");
  const schedule::region first{buffer::input, 0, half}, second{buffer::input, half, half};
  if (warm_up) {
    if (rank == 0) b.send(1, 0, first);
    if (rank == 1) b.recv(0, 0, {buffer::output, 0, half});
  } else if (rank == 0) {
    b.send(1, 1, first);
    b.send(1, 2, second);
  } else {
    const auto later = b.recv(0, 2, {buffer::output, half, half});
    b.recv(0, 1, {buffer::output, 0, half}, {later});
  }
  return std::make_shared<const schedule::schedule>(std::move(b).build());
}

/// Starts this rank's part of call `sequence`; `then` runs once it is posted, before the wait.
std::error_code run(fabric& f, std::uint64_t sequence, bool warm_up, const std::vector<std::int32_t>& in,
                    std::vector<std::int32_t>& out, std::string& message, const std::function<void()>& then = {}) {
  auto op = f.start(plan(f.rank(), warm_up), reinterpret_cast<const std::byte*>(in.data()),
                    reinterpret_cast<std::byte*>(out.data()), call(sequence),
                    reduce::host_kernels_of<reduce::sum<std::int32_t>>, 5s);
  if (then) then();
  std::error_code ec;
  op->wait(ec);
  message = op->message();
  return ec;
}

MIMATRIX_SCENARIO(unexpected_after_control) {
  fabric f(fabric_options{.mailbox = 0, .bulk = 0});
  const int me = f.rank();
  std::vector<std::int32_t> in(count), out(count, -1);
  for (std::size_t i = 0; i < count; ++i) in[i] = std::int32_t(i);
  std::string message;
  if (const auto ec = run(f, 0, true, in, out, message))  // the peers' first contact
    return std::printf("rank %d: warm-up failed: %s\n", me, message.c_str()), 1;
  if (me == 0) {
    // A control message, then the call's two messages: rank 1 reads all three at once.
    f.fail(call(1), errc::aborted, "a control message ahead of the data");
    if (run(f, 2, false, in, out, message, [&] { f.store()->set("two_halves_sent", {std::byte{1}}); }))
      return std::printf("rank 0: %s\n", message.c_str()), 1;
    return std::printf("rank 0: both halves taken\n"), 0;
  }
  (void)f.store()->get("two_halves_sent", 30s);
  // Reads the provider's queue: the control message (rank 0's word on call #1), and both
  // halves before any receive of them is posted.
  const auto heard = f.async_error();
  if (!heard || std::string(heard->what()).find("a control message ahead of the data") == std::string::npos)
    return std::printf("rank 1: rank 0's control message was not read first\n"), 1;
  if (const auto ec = run(f, 2, false, in, out, message)) return std::printf("rank 1: %s\n", message.c_str()), 1;
  for (std::size_t i = 0; i < count; ++i)
    if (out[i] != in[i])
      return std::printf("rank 1: element %zu is %d, sent as %d (the %s half)\n", i, out[i], in[i],
                         i < count / 2 ? "first" : "second"),
             1;
  return std::printf("rank 1: both halves in place\n"), 0;
}

class tag_matching : public ::testing::TestWithParam<std::string> {};

TEST_P(tag_matching, a_message_that_arrives_after_a_control_message_goes_only_to_its_own_receive) {
  const auto r = test::run_ranks(2, GetParam(), "unexpected_after_control");
  EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  ASSERT_EQ(r.output.size(), 2u);
  EXPECT_NE(r.output[0].find("both halves taken"), std::string::npos) << test::all_output(r);
  EXPECT_NE(r.output[1].find("both halves in place"), std::string::npos) << test::all_output(r);
}

INSTANTIATE_TEST_SUITE_P(over, tag_matching, ::testing::ValuesIn(test::test_providers()),
                         [](const auto& info) { return test::provider_label(info.param); });

}  // namespace MIMATRIX_UNIT_ID
}  // namespace mimatrix
