// One-sided steps over transport::inproc: writes land in the target's buffers and raise
// flags that its wait counts; flags belong to one call; failures and deadlines work.
#include "mimatrix/transport/inproc.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using schedule::buffer;
using transport::inproc;

signature sig_for(schedule::collective kind, std::size_t count, std::uint64_t sequence) {
  return {kind, reduce::op_kind::sum, dtype::int32, count, 0, sequence};
}

/// Allgather by writes: block r of every peer's output gets this rank's input; then one
/// wait for the p-1 flags with tag 3.
std::shared_ptr<const schedule::schedule> write_allgather(int p, int r, std::size_t count) {
  const schedule::descriptor d{schedule::collective::allgather, p, count, sizeof(std::int32_t), 0};
  const std::size_t bytes = count * sizeof(std::int32_t);
  schedule::builder b(d, r, "write_allgather");
  const schedule::region own{buffer::output, std::size_t(r) * bytes, bytes};
  b.copy({buffer::input, 0, bytes}, own);
  for (int q = 0; q < p; ++q)
    if (q != r) b.write(q, 3, {buffer::input, 0, bytes}, own);
  if (p > 1) b.wait(3, std::uint32_t(p - 1));
  return std::make_shared<const schedule::schedule>(std::move(b).build());
}

std::unique_ptr<mimatrix::detail::operation> start(inproc& endpoint, std::shared_ptr<const schedule::schedule> plan,
                                                   const std::vector<std::int32_t>& in, std::vector<std::int32_t>& out,
                                                   std::uint64_t sequence, std::chrono::milliseconds timeout = 10s) {
  return endpoint.start(plan, reinterpret_cast<const std::byte*>(in.data()), reinterpret_cast<std::byte*>(out.data()),
                        sig_for(plan->desc.kind, plan->desc.count, sequence), reduce::host_kernels_of<reduce::sum<std::int32_t>>, timeout);
}

TEST(one_sided, writes_land_in_the_targets_output_and_its_wait_counts_them) {
  for (int p : {1, 2, 5, 8}) {
    const std::size_t count = 1000;
    transport::run_inproc(p, [&](int r, inproc::world& w) {
      inproc endpoint(w, r);
      std::vector<std::int32_t> in(count), out(count * std::size_t(p), -1);
      std::iota(in.begin(), in.end(), r * 100000);
      auto op = start(endpoint, write_allgather(p, r, count), in, out, 0);
      std::error_code ec;
      op->wait(ec);
      ASSERT_FALSE(ec) << op->message();
      for (int q = 0; q < p; ++q)
        for (std::size_t i = 0; i < count; ++i)
          ASSERT_EQ(out[std::size_t(q) * count + i], static_cast<std::int32_t>(q * 100000 + int(i)))
              << "p " << p << " rank " << r << " block " << q;
    });
  }
}

// A fast writer starts call 1 while its target has not even entered call 0: the write
// of call 1 waits in the mailbox, and its flag never satisfies the wait of call 0.
TEST(one_sided, flags_carry_the_call_and_never_satisfy_another_calls_wait) {
  const std::size_t count = 64;
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    inproc endpoint(w, r);
    std::vector<std::vector<std::int32_t>> in(2, std::vector<std::int32_t>(count)), out(2, std::vector<std::int32_t>(2 * count, -1));
    for (int call = 0; call < 2; ++call) std::fill(in[call].begin(), in[call].end(), 10 * r + call);
    const auto plan = write_allgather(2, r, count);
    std::error_code ec;
    if (r == 1) std::this_thread::sleep_for(50ms);  // both of rank 0's writes are posted by now
    auto first = start(endpoint, plan, in[0], out[0], 0);
    auto second = start(endpoint, plan, in[1], out[1], 1);
    (void)first->test(ec);
    (void)second->test(ec);  // rank 0 posts its call-1 write before call 0 completes
    first->wait(ec);
    ASSERT_FALSE(ec) << first->message();
    second->wait(ec);
    ASSERT_FALSE(ec) << second->message();
    for (int call = 0; call < 2; ++call)
      for (int q = 0; q < 2; ++q)
        for (std::size_t i = 0; i < count; ++i)
          ASSERT_EQ(out[call][std::size_t(q) * count + i], 10 * q + call) << "rank " << r << " call " << call;
  });
}

TEST(one_sided, notify_raises_a_flag_without_data) {
  transport::run_inproc(3, [&](int r, inproc::world& w) {
    inproc endpoint(w, r);
    const schedule::descriptor d{schedule::collective::broadcast, 3, 0, 4, 0};
    schedule::builder b(d, r, "notify");
    if (r == 0) b.wait(9, 2);
    else b.notify(0, 9);
    std::vector<std::int32_t> in, out;
    auto op = start(endpoint, std::make_shared<const schedule::schedule>(std::move(b).build()), in, out, 0);
    std::error_code ec;
    op->wait(ec);
    EXPECT_FALSE(ec) << op->message();
  });
}

TEST(one_sided, a_wait_whose_flags_never_come_times_out_naming_what_arrived) {
  transport::run_inproc(3, [&](int r, inproc::world& w) {
    inproc endpoint(w, r);
    const schedule::descriptor d{schedule::collective::broadcast, 3, 0, 4, 0};
    schedule::builder b(d, r, "short");
    if (r == 0) b.wait(7, 2);
    if (r == 2) b.notify(0, 7);
    std::vector<std::int32_t> in, out;
    auto op = start(endpoint, std::make_shared<const schedule::schedule>(std::move(b).build()), in, out, 0, 200ms);
    std::error_code ec;
    op->wait(ec);
    if (r == 0) {
      EXPECT_EQ(ec, errc::timeout);
      for (const char* fragment : {"rank 0", "step 0", "wait for 2 flags with tag 7", "1 arrived (from rank(s) 2)"})
        EXPECT_NE(op->message().find(fragment), std::string::npos) << fragment << " missing: " << op->message();
    }
  });
}

TEST(one_sided, a_write_outside_the_targets_buffers_fails_with_mismatch) {
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    inproc endpoint(w, r);
    const schedule::descriptor d{schedule::collective::allreduce, 2, 4, 4, 0};
    schedule::builder b(d, r, "wild");
    if (r == 0) b.write(1, 0, {buffer::input, 0, 16}, {buffer::scratch, 0, 16});  // rank 1 has no scratch
    else b.wait(0, 1);
    std::vector<std::int32_t> in(4), out(4);
    auto op = start(endpoint, std::make_shared<const schedule::schedule>(std::move(b).build()), in, out, 0);
    std::error_code ec;
    op->wait(ec);
    EXPECT_EQ(ec, errc::mismatch) << op->message();
    if (r == 1) {
      EXPECT_NE(op->message().find("not inside this rank's output (16 bytes) or scratch (0 bytes)"), std::string::npos)
          << op->message();
    }
  });
}

// A target that will not take part: the writer fails with its code at once, takes its
// unclaimed write back (so nobody reads its buffer later) and does not hang.
TEST(one_sided, a_peer_that_fails_releases_the_writer) {
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    inproc endpoint(w, r);
    const auto plan = write_allgather(2, r, 16);
    const signature sig = sig_for(plan->desc.kind, 16, 0);
    if (r == 1) {
      std::this_thread::sleep_for(20ms);
      endpoint.fail(sig, errc::invalid_argument, "rank 1: bad input");
      return;
    }
    std::vector<std::int32_t> in(16, 1), out(32);
    auto op = start(endpoint, plan, in, out, 0);
    std::error_code ec;
    op->wait(ec);
    EXPECT_EQ(ec, errc::invalid_argument) << op->message();
    EXPECT_NE(op->message().find("rank 1: bad input"), std::string::npos) << op->message();
  });
}

}  // namespace
}  // namespace mimatrix
