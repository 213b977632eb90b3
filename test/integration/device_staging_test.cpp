// Device buffers across processes over libfabric, which moves host memory here (with
// MIMATRIX_DEVICE_IPC=0: else peers on one host read each other's blocks): the executor
// runs the call on host copies (transport/host_staging.hpp) without blocking the
// caller. Exact results on a host "device" whose streams run late, after a late producer
// queued on the stream and before a consumer queued after the call, with only the stream
// synchronized; and a call returns before the work queued ahead of it has run.
#include "mimatrix/transport/fabric.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/device/host_port.hpp"
#include "mimatrix/topology/mesh.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using transport::fabric;

MIMATRIX_SCENARIO(staged_collectives) {
  device::host_port dev({.lag = 100us});  // before the communicator: its own streams on it go first
  communicator<fabric> comm;
  comm.set_timeout(30s);
  collectives<fabric> coll(comm);
  const int p = comm.size(), r = comm.rank();
  const device::stream s{&dev, dev.make_stream()};
  const call_options on_stream{.algorithm = {}, .timeout = {}, .stream = s, .tag = 0};
  int wrong = 0;

  constexpr std::size_t n = 100'003;
  std::vector<std::int64_t> data(n, 0), seen;
  dev.enqueue(s.handle, [&] {
    std::this_thread::sleep_for(30ms);
    for (std::size_t i = 0; i < n; ++i) data[i] = std::int64_t(i % 1000) * (r + 1);
  });
  auto pending = coll.allreduce(data.data(), data.data(), n, dtype::int64, reduce::op_kind::sum, on_stream);
  dev.enqueue(s.handle, [&] { seen = data; });
  dev.synchronize(s.handle);
  pending.wait();
  for (std::size_t i = 0; i < n && seen.size() == n; ++i)
    wrong += seen[i] != std::int64_t(i % 1000) * (p * (p + 1) / 2);
  wrong += seen.size() != n;

  std::vector<float> mine(1000, float(r + 1)), all(1000 * std::size_t(p));
  coll.allgather(mine.data(), all.data(), mine.size(), dtype::float32, on_stream).wait();
  for (std::size_t i = 0; i < all.size(); ++i) wrong += all[i] != float(i / 1000 + 1);

  // Calls in flight one after another on the stream, none waited for in between (a
  // trainer's gradient buckets), GDRAA's among them: each stages on a stream of its own.
  {
    std::vector<std::vector<std::int32_t>> buckets;
    for (int c = 0; c < 3; ++c) buckets.emplace_back(4000, std::int32_t(r + c));
    collectives<fabric, topology::mesh> in_mesh(comm);
    std::vector<request> in_flight;
    for (int c = 0; c < 3; ++c) {
      call_options o = on_stream;
      o.algorithm = c == 1 ? "gdraa" : "recursive_doubling";
      in_flight.push_back(in_mesh.allreduce(buckets[std::size_t(c)].data(), buckets[std::size_t(c)].data(), 4000,
                                            dtype::int32, reduce::op_kind::sum, o));
    }
    dev.synchronize(s.handle);
    for (auto& q : in_flight) q.wait();
    for (int c = 0; c < 3; ++c)
      for (std::int32_t v : buckets[std::size_t(c)]) wrong += v != p * (p - 1) / 2 + p * c;
  }

  // GDRAA writes into the RMA window, whose output comes out whole at the end.
  collectives<fabric, topology::mesh> mesh(comm);
  call_options gdraa = on_stream;
  gdraa.algorithm = "gdraa";
  std::vector<std::int64_t> written(5000);
  for (std::size_t i = 0; i < written.size(); ++i) written[i] = std::int64_t(i) + r;
  mesh.allreduce(written.data(), written.data(), written.size(), dtype::int64, reduce::op_kind::sum, gdraa).wait();
  for (std::size_t i = 0; i < written.size(); ++i) wrong += written[i] != p * std::int64_t(i) + p * (p - 1) / 2;

  std::vector<std::int32_t> root(777, 5), got(777, 0);
  coll.broadcast(r == p - 1 ? root.data() : nullptr, got.data(), got.size(), dtype::int32, p - 1, on_stream).wait();
  for (std::int32_t v : got) wrong += v != 5;

  // Reduce, gather, scatter and alltoall stage as the others do; the root alone holds the
  // whole buffer, the other ranks pass null where the call reads or writes nothing.
  {
    const int root = p / 2;
    std::vector<std::int32_t> part(301, r + 1), whole(301 * std::size_t(p), -1), block(301, -1);
    coll.reduce(part.data(), r == root ? block.data() : nullptr, part.size(), dtype::int32, reduce::op_kind::sum,
                root, on_stream)
        .wait();
    if (r == root)
      for (std::int32_t v : block) wrong += v != p * (p + 1) / 2;
    coll.gather(part.data(), r == root ? whole.data() : nullptr, part.size(), dtype::int32, root, on_stream).wait();
    if (r == root)
      for (std::size_t i = 0; i < whole.size(); ++i) wrong += whole[i] != std::int32_t(i / 301 + 1);
    if (r == root)
      for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = std::int32_t(i);
    coll.scatter(r == root ? whole.data() : nullptr, block.data(), block.size(), dtype::int32, root, on_stream).wait();
    for (std::size_t i = 0; i < block.size(); ++i) wrong += block[i] != std::int32_t(std::size_t(r) * 301 + i);
    std::vector<std::int32_t> out(whole.size());
    for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = std::int32_t(i) + 1000 * r;
    coll.alltoall(whole.data(), out.data(), 301, dtype::int32, on_stream).wait();
    for (std::size_t i = 0; i < out.size(); ++i)
      wrong += out[i] != std::int32_t(std::size_t(r) * 301 + i % 301) + 1000 * std::int32_t(i / 301);
    if (wrong) std::printf("rank %d: a reduce, gather, scatter or alltoall on the stream was wrong\n", r);
  }

  // The v-forms stage alike: rank j's block holds j + 1 elements, rank 0's none.
  {
    std::vector<std::size_t> counts(static_cast<std::size_t>(p));
    for (int j = 0; j < p; ++j) counts[std::size_t(j)] = std::size_t(j) * 7;
    const std::size_t total = std::size_t(p) * std::size_t(p - 1) * 7 / 2, own = counts[std::size_t(r)];
    std::vector<std::int32_t> mine(own, r + 1), all(total, -1), back(own, -1);
    coll.allgatherv(mine.data(), own, all.data(), counts, {}, dtype::int32, on_stream).wait();
    for (int j = 0, at = 0; j < p; at += j * 7, ++j)
      for (int k = 0; k < j * 7; ++k) wrong += all[std::size_t(at + k)] != j + 1;
    coll.reduce_scatter_v(all.data(), back.data(), counts, dtype::int32, reduce::op_kind::sum, on_stream).wait();
    for (std::int32_t v : back) wrong += v != p * (r + 1);
    std::vector<std::size_t> ones(std::size_t(p), 1);
    std::vector<std::int32_t> to_each(std::size_t(p), r), from_each(std::size_t(p), -1);
    coll.alltoallv(to_each.data(), ones, {}, from_each.data(), ones, {}, dtype::int32, on_stream).wait();
    for (int j = 0; j < p; ++j) wrong += from_each[std::size_t(j)] != j;
    if (wrong) std::printf("rank %d: a v-form on the stream was wrong\n", r);
  }

  // Non-blocking, as NCCL's calls are: the producer queued before the call waits until
  // this thread has returned from starting it. A call that waited on the host for its
  // input (the staging before this change) would wait for the producer for ever; the
  // producer gives up after 20 s and says so.
  std::atomic<bool> started{false};
  bool producer_gave_up = false;
  std::vector<std::int32_t> grad(4099, 0), after;
  dev.enqueue(s.handle, [&] {
    const auto limit = std::chrono::steady_clock::now() + 20s;
    while (!started.load() && std::chrono::steady_clock::now() < limit) std::this_thread::sleep_for(1ms);
    producer_gave_up = !started.load();
    for (std::size_t i = 0; i < grad.size(); ++i) grad[i] = std::int32_t(i) * (r + 1);
  });
  auto bucket = coll.allreduce(grad.data(), grad.data(), grad.size(), dtype::int32, reduce::op_kind::sum, on_stream);
  started = true;
  dev.enqueue(s.handle, [&] { after = grad; });
  dev.synchronize(s.handle);
  bucket.wait();
  if (producer_gave_up) std::printf("rank %d: the call blocked until its input was produced\n", r);
  wrong += producer_gave_up;
  for (std::size_t i = 0; i < after.size(); ++i) wrong += after[i] != std::int32_t(i) * (p * (p + 1) / 2);
  wrong += after.size() != grad.size();

  if (dev.host_copies() == 0) std::printf("rank %d: nothing was copied through host memory\n", r);
  wrong += dev.host_copies() == 0;

  dev.free_stream(s.handle);
  if (wrong == 0) std::printf("rank %d: staged device calls exact\n", r);
  return wrong == 0 ? 0 : 1;
}

// A call whose staging must grow (it is larger than any before) while an earlier call's
// gate holds the stream, on a "GPU" whose allocations wait for its queued work, as CUDA's
// may. Made under the progress engine's lock, the call's allocation waited for a gate that
// only the progress thread, shut out by that lock, could open (it failed after 5 s).
MIMATRIX_SCENARIO(staging_grows_while_a_call_is_in_flight) {
  device::host_port dev({.lag = 20us, .allocations_wait_for_device = 5000ms});
  communicator<fabric> comm;
  comm.set_timeout(30s);
  collectives<fabric> coll(comm);
  const int p = comm.size(), r = comm.rank();
  const device::stream s{&dev, dev.make_stream()};
  const call_options on_stream{.algorithm = {}, .timeout = {}, .stream = s, .tag = 0};
  std::vector<std::int64_t> first(1000, r + 1), second(100'000, 10 * (r + 1));
  if (r == p - 1) std::this_thread::sleep_for(300ms);  // the first call waits for it
  auto a = coll.allreduce(first.data(), first.data(), first.size(), dtype::int64, reduce::op_kind::sum, on_stream);
  auto b = coll.allreduce(second.data(), second.data(), second.size(), dtype::int64, reduce::op_kind::sum, on_stream);
  a.wait();
  b.wait();
  dev.synchronize(s.handle);
  int wrong = 0;
  for (std::int64_t v : first) wrong += v != p * (p + 1) / 2;
  for (std::int64_t v : second) wrong += v != 10 * p * (p + 1) / 2;
  dev.free_stream(s.handle);
  if (wrong == 0) std::printf("rank %d: staged device calls exact\n", r);
  return wrong == 0 ? 0 : 1;
}

class device_staging : public ::testing::TestWithParam<std::string> {};

void expect_exact(const bootstrap::launch_result& result, int ranks) {
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int r = 0; r < ranks; ++r)
    EXPECT_NE(result.output[std::size_t(r)].find("staged device calls exact"), std::string::npos)
        << test::all_output(result);
}

// Peers on one host would read each other's device memory instead (device_sharing_test).
const std::vector<std::pair<std::string, std::string>> staged{{"MIMATRIX_DEVICE_IPC", "0"}};

TEST_P(device_staging, stages_device_buffers_through_the_host_exactly) {
  expect_exact(test::run_ranks(3, GetParam(), "staged_collectives", staged), 3);
}

// Small pieces: every buffer goes out and comes back in up to 64 pieces, each its own copy
// on a stream that runs late. A step that read a piece before its copy ran, or a piece
// copied back before its last writer, would leave wrong values.
TEST_P(device_staging, in_small_pieces_every_step_waits_for_its_input_and_every_piece_for_its_writers) {
  expect_exact(test::run_ranks(3, GetParam(), "staged_collectives",
                               {{"MIMATRIX_STAGING_PIECE_BYTES", "1024"}, {"MIMATRIX_DEVICE_IPC", "0"}}),
               3);
}

TEST_P(device_staging, staging_that_must_grow_while_a_call_is_in_flight_lets_it_end) {
  expect_exact(test::run_ranks(3, GetParam(), "staging_grows_while_a_call_is_in_flight", staged), 3);
}

// A provider that cannot move device memory itself (tcp: no FI_HMEM) stages it, even
// where MIMATRIX_DEVICE_HMEM=on asks for that.
TEST(device_staging_without_fi_hmem, tcp_stages_device_buffers_asked_to_move_them_directly) {
  expect_exact(test::run_ranks(3, "tcp;ofi_rxm", "staged_collectives",
                               {{"MIMATRIX_DEVICE_IPC", "0"}, {"MIMATRIX_DEVICE_HMEM", "on"}}),
               3);
}

INSTANTIATE_TEST_SUITE_P(fabric, device_staging, ::testing::ValuesIn(test::test_providers()),
                         [](const auto& info) { return test::provider_label(info.param); });

}  // namespace
}  // namespace mimatrix
