// Collectives on GPU memory across processes sharing one GPU, through the CUDA port (issue
// 13's GPU tests; skips where there is no GPU). Over shm the peers read each other's
// device memory (CUDA IPC); with MIMATRIX_DEVICE_IPC=0, and over tcp, calls stage through
// pinned host memory. Every algorithm (gdraa's allreduce over IPC as one pass a rank into
// every peer's output, also as automatic's choice), dtype and op, exact on small integers; a late
// producer kernel before each call and a consumer copy after it, with only the stream
// synchronized; reduce-scatter, allgather (GDRAA's as one pass a rank too, every dtype and
// op) and broadcast; buffers freed and allocated around every call; a rank that dies
// fails the others' call, whose stream then goes on.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpu_streams.hpp"
#include "mimatrix/collectives.hpp"
#include "mimatrix/topology/mesh.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "multi_process.hpp"
#include "support/dtypes.hpp"
#include "support/grid.hpp"
#include "support/small_values.hpp"

namespace mimatrix {
namespace {

using namespace std::chrono_literals;
using transport::fabric;

call_options on(const device::stream& s, std::string algorithm = {}, std::chrono::milliseconds timeout = 30s) {
  return {.algorithm = std::move(algorithm), .timeout = timeout, .stream = s, .tag = 0};
}

constexpr reduce::op_kind all_ops[] = {reduce::op_kind::sum, reduce::op_kind::prod, reduce::op_kind::min,
                                       reduce::op_kind::max, reduce::op_kind::avg};

/// Device memory and a pinned host mirror of it, both of `bytes`.
struct gpu_buffer {
  gpu_buffer(device::port& p, std::size_t n) : port(p), bytes(n) {}
  device::port& port;
  std::size_t bytes;
  void* device = port.allocate_device(bytes);
  void* host = port.allocate_host(bytes);
  ~gpu_buffer() {
    port.free_device(device, bytes);
    port.free_host(host, bytes);
  }
  gpu_buffer(const gpu_buffer&) = delete;
  gpu_buffer& operator=(const gpu_buffer&) = delete;
};

MIMATRIX_SCENARIO(cuda_collectives) {
  device::port* dev = test::gpu::port_or_null();
  if (!dev) return std::printf("no GPU in a rank\n"), 1;
  communicator<fabric> comm;
  collectives<fabric> coll(comm);
  collectives<fabric, topology::mesh> mesh(comm);  // gdraa: one pass a rank over the peers' memory (IPC)
  const int p = comm.size(), r = comm.rank();
  const device::stream s{dev, dev->make_stream()};
  constexpr std::size_t n = 4099;
  gpu_buffer buf(*dev, n * sizeof(double) * 4);
  int wrong = 0;

  // "": automatic on the ring topology, which takes GDRAA's one pass where peers share memory.
  for (const std::string algo : {"ring", "recursive_doubling", "halving_doubling", "gdraa", ""})
    for (const dtype t : test::all_dtypes)
      for (const reduce::op_kind op : all_ops)
        test::with_dtype(t, [&](auto tag) {
          using T = typename decltype(tag)::type;
          T* h = static_cast<T*>(buf.host);
          for (std::size_t i = 0; i < n; ++i) h[i] = T(static_cast<float>(test::small_value(r, i)));
          // The input lands after a 2 ms kernel; the result is read by a copy queued after
          // the call; only the stream is synchronized.
          test::gpu::hold_stream(s.handle, 2000);
          dev->copy(s.handle, buf.device, h, n * sizeof(T));
          auto pending = algo == "gdraa" ? mesh.allreduce(buf.device, buf.device, n, t, op, on(s, algo))
                                         : coll.allreduce(buf.device, buf.device, n, t, op, on(s, algo));
          dev->copy(s.handle, h, buf.device, n * sizeof(T));
          dev->synchronize(s.handle);
          pending.wait();
          for (std::size_t i = 0; i < n; ++i) {
            // An average of floats is not a small integer: it is exact once rounded to T.
            const double exact = test::reduced_small_values(op, p, i, std::is_integral_v<T>);
            const double want = std::is_same_v<T, double> ? exact : test::to_double(T(static_cast<float>(exact)));
            if (test::to_double(h[i]) == want) continue;
            std::printf("rank %d: %s %s %s: element %zu is %g, expected %g\n", r,
                        algo.empty() ? "automatic" : algo.c_str(), std::string(to_string(t)).c_str(),
                        std::string(reduce::to_string(op)).c_str(), i, test::to_double(h[i]), want);
            ++wrong;
            break;
          }
        });

  // GDRAA's reduce-scatter and allgather over IPC, in place, as one pass a rank (one
  // destination of p sources, and one source into p destinations): every dtype and op.
  for (const dtype t : test::all_dtypes)
    test::with_dtype(t, [&](auto tag) {
      using T = typename decltype(tag)::type;
      constexpr std::size_t b = 1001;
      T* h = static_cast<T*>(buf.host);
      T* d = static_cast<T*>(buf.device);
      T* own = d + std::size_t(r) * b;
      for (const reduce::op_kind op : all_ops) {
        for (std::size_t i = 0; i < b * std::size_t(p); ++i) h[i] = T(static_cast<float>(test::small_value(r, i)));
        dev->copy(s.handle, d, h, b * std::size_t(p) * sizeof(T));
        mesh.reduce_scatter(d, own, b, t, op, on(s, "gdraa")).wait();
        dev->copy(s.handle, h, own, b * sizeof(T));
        dev->synchronize(s.handle);
        for (std::size_t i = 0; i < b; ++i) {
          const double exact = test::reduced_small_values(op, p, std::size_t(r) * b + i, std::is_integral_v<T>);
          const double want = std::is_same_v<T, double> ? exact : test::to_double(T(static_cast<float>(exact)));
          if (test::to_double(h[i]) == want) continue;
          std::printf("rank %d: gdraa reduce_scatter %s %s: element %zu is %g, expected %g\n", r,
                      std::string(to_string(t)).c_str(), std::string(reduce::to_string(op)).c_str(), i,
                      test::to_double(h[i]), want);
          ++wrong;
          break;
        }
      }
      for (std::size_t i = 0; i < b; ++i) h[i] = T(static_cast<float>(r * 7 + int(i % 13)));
      dev->copy(s.handle, own, h, b * sizeof(T));
      mesh.allgather(own, d, b, t, on(s, "gdraa")).wait();
      dev->copy(s.handle, h, d, b * std::size_t(p) * sizeof(T));
      dev->synchronize(s.handle);
      for (std::size_t i = 0; i < b * std::size_t(p); ++i)
        if (test::to_double(h[i]) != double(int(i / b) * 7 + int(i % b % 13))) {
          std::printf("rank %d: gdraa allgather %s: element %zu is %g\n", r, std::string(to_string(t)).c_str(), i,
                      test::to_double(h[i]));
          ++wrong;
          break;
        }
    });

  // Reduce-scatter, allgather (automatic's one pass on 3 ranks over IPC), and a broadcast
  // cut into chunks, on int32.
  auto* h = static_cast<std::int32_t*>(buf.host);
  auto* d = static_cast<std::int32_t*>(buf.device);
  constexpr std::size_t m = 1000;
  for (std::size_t i = 0; i < m * std::size_t(p); ++i) h[i] = test::small_value(r, i);
  dev->copy(s.handle, d, h, m * std::size_t(p) * 4);
  coll.reduce_scatter(d, d + m * std::size_t(p), m, dtype::int32, reduce::op_kind::sum, on(s)).wait();
  dev->copy(s.handle, h, d + m * std::size_t(p), m * 4);
  dev->synchronize(s.handle);
  for (std::size_t i = 0; i < m; ++i)
    wrong += h[i] != test::reduced_small_values(reduce::op_kind::sum, p, std::size_t(r) * m + i, true);

  for (std::size_t i = 0; i < m; ++i) h[i] = r * 1000 + int(i);
  dev->copy(s.handle, d, h, m * 4);
  coll.allgather(d, d + m, m, dtype::int32, on(s)).wait();
  dev->copy(s.handle, h, d + m, m * std::size_t(p) * 4);
  dev->synchronize(s.handle);
  for (std::size_t i = 0; i < m * std::size_t(p); ++i) wrong += h[i] != int(i / m) * 1000 + int(i % m);

  const std::size_t big = buf.bytes / 4;
  for (std::size_t i = 0; i < big; ++i) h[i] = r == 0 ? int(i % 977) : -1;
  dev->copy(s.handle, d, h, big * 4);
  coll.broadcast(r == 0 ? d : nullptr, d, big, dtype::int32, 0, on(s)).wait();
  dev->copy(s.handle, h, d, big * 4);
  dev->synchronize(s.handle);
  for (std::size_t i = 0; i < big; ++i) wrong += h[i] != int(i % 977);

  dev->free_stream(s.handle);
  if (wrong == 0) std::printf("rank %d: GPU calls exact\n", r);
  return wrong == 0 ? 0 : 1;
}

// The last rank dies before the call; the others' call fails within its deadline, not a
// hang, with a consumer queued behind it on the stream, which then goes on.
MIMATRIX_SCENARIO(cuda_peer_dies) {
  device::port* dev = test::gpu::port_or_null();
  if (!dev) return std::printf("no GPU in a rank\n"), 1;
  communicator<fabric> comm;
  collectives<fabric> coll(comm);
  const int p = comm.size(), r = comm.rank();
  const device::stream s{dev, dev->make_stream()};
  gpu_buffer buf(*dev, 1 << 20);
  coll.allreduce(buf.device, buf.device, (1 << 20) / 4, dtype::int32, reduce::op_kind::sum, on(s)).wait();
  if (r == p - 1) ::kill(::getpid(), SIGKILL);
  std::this_thread::sleep_for(200ms);
  std::string what = "succeeded";
  auto pending = coll.allreduce(buf.device, buf.device, (1 << 20) / 4, dtype::int32, reduce::op_kind::sum,
                                on(s, {}, 3000ms));
  dev->copy(s.handle, buf.host, buf.device, 1 << 20);
  dev->synchronize(s.handle);  // returns: the failed call let the stream go
  try {
    pending.wait();
  } catch (const error& e) {
    what = "CAUGHT " + e.code().message() + ": " + e.what();
  }
  dev->free_stream(s.handle);
  std::printf("rank %d: %s\n", r, what.c_str());
  return what != "succeeded" ? 0 : 1;
}

// Buffers freed and allocated again around every call (cudaMalloc and cudaFree): peers
// close a rank's freed blocks once a newer block lands on their address, on a thread of
// their port's own, while calls go on. Exact every time; the blocks open are printed
// (cudaMalloc usually, not always, gives a freed range back, so they are not asserted).
MIMATRIX_SCENARIO(cuda_fresh_buffers) {
  device::port* dev = test::gpu::port_or_null();
  if (!dev) return std::printf("no GPU in a rank\n"), 1;
  communicator<fabric> comm;
  collectives<fabric> coll(comm);
  const int p = comm.size(), r = comm.rank();
  const device::stream s{dev, dev->make_stream()};
  constexpr std::size_t n = 1 << 18;
  constexpr int rounds = 20;
  std::vector<std::int32_t> host(n);
  int wrong = 0;
  for (int round = 0; round < rounds; ++round)
    for (const std::string algo : {"", "ring"}) {
      gpu_buffer in(*dev, n * sizeof(std::int32_t)), out(*dev, n * sizeof(std::int32_t));
      for (std::size_t i = 0; i < n; ++i) host[i] = std::int32_t(i % 1000) * (r + 1) + round;
      dev->copy(s.handle, in.device, host.data(), n * sizeof(std::int32_t));
      auto pending = coll.allreduce(in.device, out.device, n, dtype::int32, reduce::op_kind::sum, on(s, algo));
      dev->copy(s.handle, host.data(), out.device, n * sizeof(std::int32_t));
      dev->synchronize(s.handle);
      pending.wait();
      for (std::size_t i = 0; i < n; ++i)
        if (host[i] != std::int32_t(i % 1000) * (p * (p + 1) / 2) + p * round) {
          std::printf("rank %d: round %d %s: element %zu is %d\n", r, round, algo.empty() ? "automatic" : "ring", i,
                      host[i]);
          ++wrong;
          break;
        }
    }
  dev->free_stream(s.handle);
  std::printf("rank %d: %zu peers' blocks open after %d rounds of fresh buffers\n", r, test::gpu::imported_blocks(),
              rounds);
  if (wrong == 0) std::printf("rank %d: fresh buffers exact\n", r);
  return wrong == 0 ? 0 : 1;
}

class device_cuda : public ::testing::TestWithParam<std::pair<std::string, std::string>> {
 protected:
  void SetUp() override {
    if (const std::string why = test::gpu::why_processes_cannot_share_a_gpu(); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(device_cuda, processes_sharing_a_gpu_are_exact_for_every_algorithm_dtype_and_op) {
  const auto& [provider, ipc] = GetParam();
  const auto result = test::run_ranks(3, provider, "cuda_collectives", {{"MIMATRIX_DEVICE_IPC", ipc}});
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int k = 0; k < 3; ++k)
    EXPECT_NE(result.output[std::size_t(k)].find("GPU calls exact"), std::string::npos) << test::all_output(result);
}

TEST_P(device_cuda, a_dead_peer_fails_the_call_and_the_stream_goes_on) {
  const auto& [provider, ipc] = GetParam();
  const auto result = test::run_ranks(3, provider, "cuda_peer_dies", {{"MIMATRIX_DEVICE_IPC", ipc}}, 60s);
  for (int k = 0; k < 2; ++k)
    EXPECT_NE(result.output[std::size_t(k)].find("CAUGHT"), std::string::npos) << test::all_output(result);
}

TEST_P(device_cuda, buffers_freed_and_allocated_around_every_call_are_exact) {
  const auto& [provider, ipc] = GetParam();
  const auto result = test::run_ranks(3, provider, "cuda_fresh_buffers", {{"MIMATRIX_DEVICE_IPC", ipc}}, 120s);
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int k = 0; k < 3; ++k)
    EXPECT_NE(result.output[std::size_t(k)].find("fresh buffers exact"), std::string::npos) << test::all_output(result);
}

INSTANTIATE_TEST_SUITE_P(fabric, device_cuda,
                         ::testing::Values(std::pair<std::string, std::string>{"shm", "1"},
                                           std::pair<std::string, std::string>{"shm", "0"},
                                           std::pair<std::string, std::string>{"tcp;ofi_rxm", "0"}),
                         [](const auto& info) {
                           return test::provider_label(info.param.first) + (info.param.second == "1" ? "_ipc" : "_staged");
                         });

}  // namespace
}  // namespace mimatrix
