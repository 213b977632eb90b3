#include "mimatrix/transport/inproc.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using schedule::buffer;
using transport::inproc;

/// A direct allreduce: every rank sends its whole input to every peer at once and
/// reduces what arrives, all p-1 sends and receives in flight together.
std::shared_ptr<const schedule::schedule> direct_allreduce(int p, int rank, std::size_t count) {
  const schedule::descriptor d{schedule::collective::allreduce, p, count, sizeof(std::int32_t), 0};
  const std::size_t bytes = count * sizeof(std::int32_t);
  schedule::builder b(d, rank, "direct");
  const auto copied = b.copy({buffer::input, 0, bytes}, {buffer::output, 0, bytes});
  std::vector<schedule::step_id> last{copied};
  for (int peer = 0; peer < p; ++peer) {
    if (peer == rank) continue;
    b.send(peer, 0, {buffer::input, 0, bytes});
    // Receives reduce into the output one after another (each depends on the last).
    last = {b.add(schedule::step_kind::recv_reduce, peer, 0, {buffer::output, 0, bytes},
                  {buffer::output, 0, bytes}, last)};
  }
  b.add(schedule::step_kind::finalize, -1, 0, {}, {buffer::output, 0, bytes}, last);
  return std::make_shared<const schedule::schedule>(std::move(b).build());
}

signature sig_for(std::size_t count, std::uint64_t sequence) {
  return {schedule::collective::allreduce, reduce::op_kind::sum, dtype::int32, count, 0, sequence};
}

TEST(inproc, executes_a_schedule_with_every_send_in_flight_at_once) {
  const int p = 6;
  const std::size_t count = 4096;
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    inproc endpoint(w, r);
    std::vector<std::int32_t> in(count), out(count);
    std::iota(in.begin(), in.end(), r * 1000);
    auto op = endpoint.start(direct_allreduce(p, r, count), reinterpret_cast<const std::byte*>(in.data()),
                             reinterpret_cast<std::byte*>(out.data()), sig_for(count, 0), reduce::host_kernels_of<reduce::sum<std::int32_t>>,
                             10s);
    std::error_code ec;
    op->wait(ec);
    ASSERT_FALSE(ec) << op->message();
    for (std::size_t i = 0; i < count; ++i)
      ASSERT_EQ(out[i], static_cast<std::int32_t>(p * i + 1000 * p * (p - 1) / 2)) << "rank " << r << " element " << i;
  });
}

TEST(inproc, a_receive_nobody_sends_times_out_naming_step_peer_and_tag) {
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    inproc endpoint(w, r);
    const schedule::descriptor d{schedule::collective::allreduce, 2, 4, 4, 0};
    schedule::builder b(d, r, "lonely");
    if (r == 0) b.recv(1, 42, {buffer::output, 0, 16});
    std::vector<std::int32_t> in(4), out(4);
    auto op = endpoint.start(std::make_shared<const schedule::schedule>(std::move(b).build()),
                             reinterpret_cast<const std::byte*>(in.data()), reinterpret_cast<std::byte*>(out.data()),
                             sig_for(4, 0), reduce::host_kernels_of<reduce::sum<std::int32_t>>, 200ms);
    std::error_code ec;
    op->wait(ec);
    if (r == 0) {
      EXPECT_EQ(ec, errc::timeout);
      for (const char* fragment : {"rank 0", "allreduce #0", "step 0", "peer 1", "waiting for data from rank 1 (recv, tag 42)"})
        EXPECT_NE(op->message().find(fragment), std::string::npos) << fragment << " missing: " << op->message();
    }
  });
}

TEST(inproc, test_polls_without_blocking_and_reports_the_deadline) {
  inproc::world w(2);
  inproc endpoint(w, 0);  // rank 1 never starts
  std::vector<std::int32_t> in(8), out(8);
  auto op = endpoint.start(direct_allreduce(2, 0, 8), reinterpret_cast<const std::byte*>(in.data()),
                           reinterpret_cast<std::byte*>(out.data()), sig_for(8, 0), reduce::host_kernels_of<reduce::sum<std::int32_t>>, 100ms);
  std::error_code ec;
  EXPECT_FALSE(op->test(ec));
  EXPECT_FALSE(ec);
  const auto start = std::chrono::steady_clock::now();
  while (!op->test(ec)) ASSERT_LT(std::chrono::steady_clock::now() - start, 5s) << "test() never gave up";
  EXPECT_EQ(ec, errc::timeout);
  EXPECT_NE(op->message().find("rank(s) 1 never called"), std::string::npos) << op->message();
}

TEST(inproc, messages_of_different_calls_never_match) {
  // Rank 0 runs call #1 while rank 1 runs call #0: same tags, different sequence numbers.
  std::vector<std::error_code> codes(2);
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    inproc endpoint(w, r);
    std::vector<std::int32_t> in(16, 1), out(16);
    auto op = endpoint.start(direct_allreduce(2, r, 16), reinterpret_cast<const std::byte*>(in.data()),
                             reinterpret_cast<std::byte*>(out.data()), sig_for(16, r == 0 ? 1 : 0),
                             reduce::host_kernels_of<reduce::sum<std::int32_t>>, 200ms);
    op->wait(codes[r]);
  });
  EXPECT_EQ(codes[0], errc::timeout);
  EXPECT_EQ(codes[1], errc::timeout);
}

}  // namespace
}  // namespace mimatrix
