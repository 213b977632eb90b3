// The step executor under a scripted port: what a new transport (the simulator, the CUDA
// memory space) relies on — back-pressure retried in order, receives taken early and
// consumed once ready, flags completing waits, and a stuck call named by step and peer.
#include "mimatrix/transport/step_executor.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/device/host_port.hpp"
#include "mimatrix/device/rank_streams.hpp"
#include "mimatrix/reduce/ops.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using schedule::buffer;
using schedule::step_id;
using transport::step_executor;

class yielding_port final : public transport::progress_port {
 public:
  void pause(std::uint64_t, int) override { std::this_thread::yield(); }
};

/// One rank of two whose peer is the test: sends land in `sent`, receives take what the
/// test put in `inbox` under their tag, and the first `refusals` posts are deferred.
class scripted final : public step_executor {
 public:
  scripted(transport::progress_engine& engine, std::shared_ptr<const schedule::schedule> plan, const std::byte* in,
           std::byte* out, std::chrono::milliseconds timeout, int refusals = 0, bool early = false)
      : step_executor(engine, plan, {plan->desc.kind, reduce::op_kind::sum, dtype::int32, plan->desc.count, 0, 0},
                      reduce::host_kernels_of<reduce::sum<std::int32_t>>, timeout, nullptr),
        refusals_(refusals),
        early_(early),
        scratch_(plan->scratch_bytes) {
    mem_ = {in, out, scratch_.data()};
    if (early_)
      for (step_id i = 0; i < plan->steps.size(); ++i)
        if (plan->steps[i].kind == schedule::step_kind::recv_reduce) post_early(i);
  }
  ~scripted() override { leave(); }

  void begin() { start(); }
  /// Runs the call on host copies of `caller`'s buffers (mem_ as the constructor set it).
  void stage(const device::stream& caller, device::rank_streams& resources) {
    stage_through_host(caller, resources, mem_.input, mem_.output, true);
  }
  /// Runs the call on `caller`'s memory itself (no staging); before begin().
  void on_device(const device::stream& caller, device::rank_streams& resources) {
    run_on_device(caller, resources);
  }

  int polls_after_conclusion = 0;  // the transport gave its memory back in conclude()
  std::string ended;                // what ended_peers() says
  std::string ended_once_concluded;  // ... from conclude() on

  std::map<std::uint32_t, std::vector<std::int32_t>> inbox;  // by tag
  std::vector<std::pair<std::uint32_t, std::vector<std::int32_t>>> sent;  // (tag, data), in order
  std::vector<step_id> post_order;
  std::vector<std::pair<std::uint32_t, int>> flags_to_raise;

 private:
  posted post(step_id id) override {
    post_order.push_back(id);
    if (refusals_ > 0) {
      --refusals_;
      return posted::deferred;
    }
    const schedule::step& st = step_at(id);
    if (st.kind == schedule::step_kind::send) {
      std::vector<std::int32_t> data(st.src.bytes / sizeof(std::int32_t));
      std::memcpy(data.data(), mem_.read(st.src), st.src.bytes);
      sent.emplace_back(st.tag, std::move(data));
      return posted::done;
    }
    waiting_.push_back(id);
    return posted::started;
  }

  bool conclude() override {
    if (!ended_once_concluded.empty()) ended = ended_once_concluded;
    return concluded_ = true;
  }
  void stalled(int) override { polls_after_conclusion += concluded_; }
  std::string ended_peers() const override { return ended; }

  bool poll() override {
    polls_after_conclusion += concluded_;
    bool changed = false;
    for (auto [tag, writer] : flags_to_raise) raise_flag(tag, writer), changed = true;
    flags_to_raise.clear();
    for (std::size_t k = 0; k < waiting_.size();) {
      auto it = inbox.find(step_at(waiting_[k]).tag);
      if (it == inbox.end()) {
        ++k;
        continue;
      }
      arrived_[waiting_[k]] = it->second;
      const step_id id = waiting_[k];
      waiting_.erase(waiting_.begin() + std::ptrdiff_t(k));
      arrive(id, reinterpret_cast<const std::byte*>(arrived_[id].data()));
      changed = true;
    }
    return changed;
  }

  bool posts_early(step_id id) const override {
    return early_ && plan().steps[id].kind == schedule::step_kind::recv_reduce;  // as the constructor does
  }
  const std::byte* arrived_data(step_id id) override {
    return reinterpret_cast<const std::byte*>(arrived_.at(id).data());
  }
  void on_failure(errc, bool) override {}
  std::string_view route(step_id) const override { return "scripted"; }

  int refusals_;
  bool early_;
  bool concluded_ = false;
  std::vector<std::byte> scratch_;
  std::vector<step_id> waiting_;
  std::map<step_id, std::vector<std::int32_t>> arrived_;
};

constexpr std::size_t count = 4;
constexpr std::size_t bytes = count * sizeof(std::int32_t);

std::shared_ptr<const schedule::schedule> build(schedule::builder& b) {
  return std::make_shared<const schedule::schedule>(std::move(b).build());
}

schedule::builder builder_for() {
  return schedule::builder({schedule::collective::allreduce, 2, count, sizeof(std::int32_t), 0}, 0, "scripted");
}

TEST(step_executor, retries_posts_refused_by_back_pressure_in_the_order_refused) {
  auto b = builder_for();
  for (std::uint32_t tag = 0; tag < 3; ++tag) b.send(1, tag, {buffer::input, 0, bytes});
  const auto plan = build(b);
  transport::progress_engine engine(std::make_unique<yielding_port>());
  std::vector<std::int32_t> in{1, 2, 3, 4}, out(count);
  scripted call(engine, plan, reinterpret_cast<const std::byte*>(in.data()), reinterpret_cast<std::byte*>(out.data()),
                1s, /*refusals=*/2);
  call.begin();
  std::error_code ec;
  call.wait(ec);
  ASSERT_FALSE(ec) << call.message();
  // Steps 0 and 1 were refused, step 2 went first; the retries keep 0 before 1.
  ASSERT_EQ(call.sent.size(), 3u);
  EXPECT_EQ(call.sent[0].first, 2u);
  EXPECT_EQ(call.sent[1].first, 0u);
  EXPECT_EQ(call.sent[2].first, 1u);
  EXPECT_EQ(call.sent[1].second, in);
}

TEST(step_executor, a_receive_taken_early_is_reduced_only_once_its_dependencies_are_done) {
  auto b = builder_for();
  const step_id copied = b.copy({buffer::input, 0, bytes}, {buffer::output, 0, bytes});
  const step_id ready = b.recv(1, 7, {buffer::scratch, 0, 0});  // a gate the test opens last
  b.recv_reduce(1, 8, {buffer::output, 0, bytes}, {buffer::output, 0, bytes}, {copied, ready});
  const auto plan = build(b);
  transport::progress_engine engine(std::make_unique<yielding_port>());
  std::vector<std::int32_t> in{1, 2, 3, 4}, out(count);
  scripted call(engine, plan, reinterpret_cast<const std::byte*>(in.data()), reinterpret_cast<std::byte*>(out.data()),
                1s, 0, /*early=*/true);
  call.inbox[8] = {10, 20, 30, 40};  // arrives before the gate opens
  call.begin();
  std::error_code ec;
  EXPECT_FALSE(call.test(ec));
  EXPECT_EQ(out, (std::vector<std::int32_t>{1, 2, 3, 4})) << "reduced before its dependencies were done";
  call.inbox[7] = {};
  call.wait(ec);
  ASSERT_FALSE(ec) << call.message();
  EXPECT_EQ(out, (std::vector<std::int32_t>{11, 22, 33, 44}));
}

TEST(step_executor, flags_complete_a_wait_once_enough_have_arrived) {
  auto b = builder_for();
  const step_id waited = b.wait(5, 2);
  b.copy({buffer::input, 0, bytes}, {buffer::output, 0, bytes}, {waited});
  const auto plan = build(b);
  transport::progress_engine engine(std::make_unique<yielding_port>());
  std::vector<std::int32_t> in{1, 2, 3, 4}, out(count);
  scripted call(engine, plan, reinterpret_cast<const std::byte*>(in.data()), reinterpret_cast<std::byte*>(out.data()),
                1s);
  call.begin();
  call.flags_to_raise = {{5, 1}};
  std::error_code ec;
  EXPECT_FALSE(call.test(ec));
  EXPECT_FALSE(call.test(ec));
  call.flags_to_raise = {{5, 1}};
  call.wait(ec);
  ASSERT_FALSE(ec) << call.message();
  EXPECT_EQ(out, in);
}

// A transport gives a call's memory back in conclude() (fabric: its workspace, which the
// next call takes), while a staged call's output is still on its way back to the device:
// a poll after that read another call's receives as its own (an ASan report in CI).
TEST(step_executor, a_concluded_call_whose_output_is_on_its_way_back_is_not_polled_again) {
  auto b = builder_for();
  b.copy({buffer::input, 0, bytes}, {buffer::output, 0, bytes});
  const auto plan = build(b);
  transport::progress_engine engine(std::make_unique<yielding_port>());
  device::host_port dev({.lag = 20ms});  // the output's way back takes rounds
  device::rank_streams resources;
  const device::stream s{&dev, dev.make_stream()};
  std::vector<std::int32_t> in{1, 2, 3, 4}, out(count);
  {
    scripted call(engine, plan, reinterpret_cast<const std::byte*>(in.data()),
                  reinterpret_cast<std::byte*>(out.data()), 5s);
    call.stage(s, resources);
    call.begin();
    std::error_code ec;
    call.wait(ec);
    ASSERT_FALSE(ec) << call.message();
    EXPECT_EQ(call.polls_after_conclusion, 0);
  }
  dev.synchronize(s.handle);
  EXPECT_EQ(out, in);
  dev.free_stream(s.handle);
}

// Done with its peers, a call whose output's way back outlasts its deadline times out
// saying so; a peer that ends meanwhile is none of its business. Each device operation
// waits 400 ms: the input's two reach the host at about 800 ms, the deadline is at 1 s,
// and the output's one is back at about 1.2 s.
TEST(step_executor, a_concluded_call_held_by_its_output_s_way_back_times_out_saying_so) {
  auto b = builder_for();
  b.copy({buffer::input, 0, bytes}, {buffer::output, 0, bytes});
  const auto plan = build(b);
  transport::progress_engine engine(std::make_unique<yielding_port>());
  device::host_port dev({.lag = 400ms});
  device::rank_streams resources;
  const device::stream s{&dev, dev.make_stream()};
  std::vector<std::int32_t> in{1, 2, 3, 4}, out(count);
  {
    scripted call(engine, plan, reinterpret_cast<const std::byte*>(in.data()),
                  reinterpret_cast<std::byte*>(out.data()), 1s);
    call.ended_once_concluded = "rank 1 (pid 4242) exited or was killed";
    call.stage(s, resources);
    call.begin();
    std::error_code ec;
    call.wait(ec);
    EXPECT_EQ(ec, errc::timeout) << call.message();
    EXPECT_NE(call.message().find("with every step done, waiting for its output's way back to the device"),
              std::string::npos)
        << call.message();
  }
  dev.synchronize(s.handle);
  dev.free_stream(s.handle);
}

// Every step done, only this rank's own stream work left (a copy, a peer's data already
// read): a peer that ends then, its part of the call done too, fails nothing. (Found in
// `device_across_hosts`: a rank whose host-mate ended the call and exited failed it with
// peer_lost, about once in 20 runs.) The copy waits 300 ms; ended peers are looked for
// every 100 ms of a stuck call.
TEST(step_executor, a_peer_that_ends_while_only_this_rank_s_device_work_is_left_fails_nothing) {
  auto b = builder_for();
  b.copy({buffer::input, 0, bytes}, {buffer::output, 0, bytes});
  const auto plan = build(b);
  transport::progress_engine engine(std::make_unique<yielding_port>());
  device::host_port dev({.lag = 300ms});
  device::rank_streams resources;
  const device::stream s{&dev, dev.make_stream()};
  std::vector<std::int32_t> in{1, 2, 3, 4}, out(count);
  {
    scripted call(engine, plan, reinterpret_cast<const std::byte*>(in.data()), reinterpret_cast<std::byte*>(out.data()),
                  5s);
    call.ended = "rank 1 (pid 4242) exited or was killed";
    call.on_device(s, resources);
    call.begin();
    std::error_code ec;
    call.wait(ec);
    EXPECT_FALSE(ec) << call.message();
  }
  dev.synchronize(s.handle);
  EXPECT_EQ(out, in);
  dev.free_stream(s.handle);
}

TEST(step_executor, a_stuck_call_times_out_naming_its_step_peer_tag_and_route) {
  auto b = builder_for();
  b.send(1, 3, {buffer::input, 0, bytes});
  b.recv(1, 9, {buffer::output, 0, bytes});
  const auto plan = build(b);
  transport::progress_engine engine(std::make_unique<yielding_port>());
  std::vector<std::int32_t> in(count), out(count);
  scripted call(engine, plan, reinterpret_cast<const std::byte*>(in.data()), reinterpret_cast<std::byte*>(out.data()),
                100ms);
  call.begin();
  std::error_code ec;
  call.wait(ec);
  EXPECT_EQ(ec, errc::timeout);
  for (const char* fragment : {"rank 0", "step 1", "peer 1", "timed out after 100 ms",
                               "waiting for data from rank 1 (recv, tag 9, scripted)"})
    EXPECT_NE(call.message().find(fragment), std::string::npos) << fragment << " missing: " << call.message();
}

}  // namespace
}  // namespace mimatrix
