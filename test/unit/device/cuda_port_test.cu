// Collectives on GPU memory through device::cuda_port: ranks as threads sharing one GPU,
// every algorithm exact; a kernel that writes the input before the call and one that
// reads the output after it, on the caller's stream with no host wait between; a failed
// call that lets the stream go on; cudaMalloc memory can be shared with other processes
// and host memory cannot. Skips where there is no CUDA device.
#include "mimatrix/device/cuda_port.cuh"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/topology/bigraph.hpp"
#include "mimatrix/topology/mesh.hpp"
#include "mimatrix/transport/inproc.hpp"

namespace mimatrix {
namespace {

using namespace std::chrono_literals;
using device::cuda_port;
using transport::inproc;

#define CHECK_CUDA(call)                                                                   \
  do {                                                                                     \
    const cudaError_t status_ = (call);                                                    \
    ASSERT_EQ(status_, cudaSuccess) << #call << ": " << cudaGetErrorString(status_);        \
  } while (0)

bool has_device() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

/// A device allocation of n elements, freed on scope exit.
template <class T> struct device_array {
  T* data = nullptr;
  std::size_t n;
  explicit device_array(std::size_t count) : n(count) {
    if (cudaMalloc(&data, (n ? n : 1) * sizeof(T)) != cudaSuccess) data = nullptr;
  }
  ~device_array() { cudaFree(data); }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  /// After the work that wrote it is known done. On this thread's own stream: a copy on
  /// the legacy default stream would wait for every blocking stream, other ranks' gates too.
  std::vector<T> to_host() const {
    std::vector<T> h(n);
    cudaMemcpyAsync(h.data(), data, n * sizeof(T), cudaMemcpyDeviceToHost, cudaStreamPerThread);
    cudaStreamSynchronize(cudaStreamPerThread);
    return h;
  }
};

__device__ inline long long global_ns() {
  long long t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// data[i] = (i % 13 + 1) * (rank + 1), after `spin_ns` in every block: a late producer.
template <class T>
__global__ void fill_kernel(T* data, std::size_t n, int rank, long long spin_ns) {
  if (spin_ns > 0 && threadIdx.x == 0)
    for (const long long until = global_ns() + spin_ns; global_ns() < until;) __nanosleep(1000);
  __syncthreads();
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    data[i] = T(float((i % 13 + 1) * std::size_t(rank + 1)));
}

template <class T>
__global__ void copy_kernel(T* dst, const T* src, std::size_t n) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

class cuda_port_test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!has_device()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(cuda_port_test, a_gate_holds_a_stream_until_another_stream_opens_it) {
  cuda_port& port = cuda_port::instance();
  device::stream_handle held = port.make_stream(), opener = port.make_stream();
  device_array<int> a(1 << 20), b(1 << 20);
  device::gate g = port.hold(held);
  copy_kernel<<<64, 256, 0, static_cast<cudaStream_t>(held)>>>(b.data, a.data, a.n);  // waits behind the gate
  device::event after = port.record(held);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(port.done(after));
  fill_kernel<<<64, 256, 0, static_cast<cudaStream_t>(opener)>>>(a.data, a.n, 0, 0);
  port.open(opener, g);
  port.synchronize(held);
  EXPECT_TRUE(port.done(after));
  const auto got = b.to_host();
  for (std::size_t i = 0; i < got.size(); i += 4097) ASSERT_EQ(got[i], int(i % 13 + 1)) << i;
  port.free_event(after);
  port.free_stream(held);
  port.free_stream(opener);
}

/// The code `f` throws, or none where it throws nothing.
template <class F>
std::error_code code_thrown_by(F&& f, std::string& what) {
  try {
    f();
  } catch (const error& e) {
    what = e.what();
    return e.code();
  }
  return {};
}

TEST_F(cuda_port_test, cudamalloc_memory_is_shared_and_host_memory_is_refused) {
  cuda_port& port = cuda_port::instance();
  EXPECT_TRUE(port.shares_memory());
  device_array<int> a(1024);
  ASSERT_NE(a.data, nullptr);
  std::size_t offset = 0;
  const device::shared_memory handle = port.export_memory(a.data + 100, 200 * sizeof(int), offset);
  EXPECT_EQ(offset, 100 * sizeof(int));
  EXPECT_NE(handle.handle, device::shared_memory{}.handle);

  std::string what;
  std::vector<int> pageable(16);
  EXPECT_EQ(code_thrown_by([&] { (void)port.export_memory(pageable.data(), 64, offset); }, what), errc::invalid_argument);
  EXPECT_NE(what.find("cudaMalloc"), std::string::npos) << what;
  void* pinned = port.allocate_host(64);
  EXPECT_EQ(code_thrown_by([&] { (void)port.export_memory(pinned, 64, offset); }, what), errc::invalid_argument) << what;
  port.free_host(pinned, 64);
  EXPECT_EQ(code_thrown_by([&] { (void)port.export_memory(a.data + 1000, 100 * sizeof(int), offset); }, what),
            errc::invalid_argument)
      << "past the end of the allocation: " << what;
  CHECK_CUDA(cudaGetLastError());  // the refusals leave no error behind for the next launch
}

template <class T, class Topology>
void expect_exact(int p, Topology topo, const std::string& algorithm, dtype t, reduce::op_kind op, std::size_t n) {
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc, Topology> coll(comm, topo);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    device_array<T> data(n);
    coll.barrier();  // no rank allocates (maybe waiting for the device) while another's gate spins
    fill_kernel<<<32, 256, 0, s>>>(data.data, n, r, 0);
    coll.allreduce(data.data, data.data, n, t, op, {.algorithm = algorithm, .timeout = 20s, .stream = cuda_port::on(s), .tag = 0})
        .wait();
    const auto got = data.to_host();
    for (std::size_t i = 0; i < n; ++i) {
      double want = 0;
      for (int k = 0; k < p; ++k) want += double((i % 13 + 1) * std::size_t(k + 1));
      if (op == reduce::op_kind::max) want = double((i % 13 + 1) * std::size_t(p));
      ASSERT_EQ(double(float(got[i])), want) << algorithm << " on " << p << " ranks, rank " << r << ", element " << i;
    }
    cudaStreamDestroy(s);
  });
}

TEST_F(cuda_port_test, every_algorithm_is_exact_on_gpu_memory) {
  for (int p : {1, 2, 3, 4}) {
    for (const char* algo : {"ring", "recursive_doubling", "halving_doubling"}) {
      expect_exact<std::int32_t>(p, topology::ring{}, algo, dtype::int32, reduce::op_kind::sum, 100'003);
      expect_exact<float>(p, topology::ring{}, algo, dtype::float32, reduce::op_kind::max, 4096);
    }
    expect_exact<std::int64_t>(p, topology::mesh{}, "gdraa", dtype::int64, reduce::op_kind::sum, 65'537);
    expect_exact<half>(p, topology::bigraph{}, "hdrm", dtype::float16, reduce::op_kind::sum, 1000);
  }
}

// The caller queues a slow producer, the call, and a consumer, then only synchronizes.
TEST_F(cuda_port_test, the_call_is_ordered_on_the_callers_stream_without_a_host_wait) {
  constexpr int p = 2;
  constexpr std::size_t n = 1 << 20;
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    device_array<std::int32_t> data(n), seen(n);
    coll.barrier();
    fill_kernel<<<32, 256, 0, s>>>(data.data, n, r, 20'000'000);  // 20 ms late
    auto pending = coll.allreduce(data.data, data.data, n, dtype::int32, reduce::op_kind::sum,
                                  {.algorithm = "ring", .timeout = 20s, .stream = cuda_port::on(s), .tag = 0});
    copy_kernel<<<32, 256, 0, s>>>(seen.data, data.data, n);
    CHECK_CUDA(cudaStreamSynchronize(s));
    const auto got = seen.to_host();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], std::int32_t((i % 13 + 1) * 3)) << i;
    pending.wait();
    cudaStreamDestroy(s);
  });
}

TEST_F(cuda_port_test, a_failed_call_lets_the_stream_go_on) {
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    if (r == 1) return;
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    device_array<std::int32_t> data(1000);
    auto pending = coll.allreduce(data.data, data.data, 1000, dtype::int32, reduce::op_kind::sum,
                                  {.algorithm = {}, .timeout = 300ms, .stream = cuda_port::on(s), .tag = 0});
    CHECK_CUDA(cudaStreamSynchronize(s));  // returns once the call has failed
    std::error_code ec;
    pending.wait(ec);
    EXPECT_EQ(ec, errc::timeout);
    cudaStreamDestroy(s);
  });
}

// Ranks of one process on two GPUs (rank r on GPU r % 2), each with its GPU's port:
// receivers copy and reduce straight from the other GPU's memory (peer access).
TEST_F(cuda_port_test, ranks_of_one_process_on_two_gpus_are_exact) {
  int devices = 0;
  CHECK_CUDA(cudaGetDeviceCount(&devices));
  if (devices < 2) GTEST_SKIP() << "one GPU";
  constexpr std::size_t n = 100'003;
  for (const char* algo : {"ring", "recursive_doubling", "halving_doubling"})
    transport::run_inproc(4, [&](int r, inproc::world& w) {
      const int gpu = r % 2;
      CHECK_CUDA(cudaSetDevice(gpu));
      communicator<inproc> comm(w, r);
      collectives<inproc> coll(comm);
      cudaStream_t s = nullptr;
      CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      device_array<std::int32_t> data(n);
      coll.barrier();
      fill_kernel<<<32, 256, 0, s>>>(data.data, n, r, 0);
      coll.allreduce(data.data, data.data, n, dtype::int32, reduce::op_kind::sum,
                     {.algorithm = algo, .timeout = 20s, .stream = cuda_port::on(s, gpu), .tag = 0})
          .wait();
      const auto got = data.to_host();
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i], std::int32_t((i % 13 + 1) * 10)) << algo << ", rank " << r << " on GPU " << gpu << ", element " << i;
      cudaStreamDestroy(s);
    });
}

}  // namespace
}  // namespace mimatrix
