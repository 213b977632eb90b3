// Tests of reduce/cuda.cuh: the device kernels (combine, finalize, reduce_many) equal
// cpu.hpp's results bit for bit, for every dtype x op, size, alignment and aliasing. Skips where no CUDA device is present.
#include "mimatrix/reduce/cuda.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mimatrix/reduce/cpu.hpp"
#include "reference.hpp"

namespace {

namespace reduce = mimatrix::reduce;
using mimatrix::bfloat16;
using mimatrix::half;
using reduce::test::bits_of;
using reduce::test::same_result;

#define CHECK_CUDA(call)                                                          \
  do {                                                                            \
    const cudaError_t status_ = (call);                                           \
    ASSERT_EQ(status_, cudaSuccess) << #call << ": " << cudaGetErrorString(status_); \
  } while (0)

/// A device allocation freed on scope exit.
template <class T> struct device_array {
  T* data = nullptr;
  explicit device_array(std::size_t n) {
    if (cudaMalloc(&data, (n + 1) * sizeof(T)) != cudaSuccess) data = nullptr;  // + 1: room for an offset
  }
  ~device_array() { cudaFree(data); }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
};

template <class Op> class cuda_kernel_test : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    const cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0)
      GTEST_SKIP() << "no CUDA device (" << cudaGetErrorName(e) << ": " << cudaGetErrorString(e) << ")";
    CHECK_CUDA(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};
using all_operations = ::testing::Types<MIMATRIX_TEST_ALL_OPERATIONS>;
TYPED_TEST_SUITE(cuda_kernel_test, all_operations);

TYPED_TEST(cuda_kernel_test, combine_equals_cpu) {
  using T = typename TypeParam::value_type;
  const TypeParam op;
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  constexpr std::size_t large = (std::size_t{1} << 20) + 3;  // more than one grid's worth of packs
  std::vector<std::size_t> sizes(std::begin(reduce::test::sizes), std::end(reduce::test::sizes));
  sizes.push_back(large);
  for (std::size_t n : sizes)
    for (std::size_t offset : {0, 1})   // 1: misaligned, the element-wise path
      for (int mode = 0; mode < 3; ++mode) {  // separate dst, dst == a, dst == b
        const std::vector<T> a = reduce::test::random_elements<T>(rng, n, false);
        const std::vector<T> b = reduce::test::random_elements<T>(rng, n, false);
        std::vector<T> expected(n);
        reduce::cpu::combine(op, expected.data(), a.data(), b.data(), n);
        device_array<T> da(n), db(n), dd(n);
        ASSERT_TRUE(da.data && db.data && dd.data);
        T* const pa = da.data + offset;
        T* const pb = db.data + offset;
        T* const dst = mode == 1 ? pa : mode == 2 ? pb : dd.data + offset;
        CHECK_CUDA(cudaMemcpy(pa, a.data(), n * sizeof(T), cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(pb, b.data(), n * sizeof(T), cudaMemcpyHostToDevice));
        reduce::cuda::combine(op, dst, pa, pb, n, this->stream_);
        CHECK_CUDA(cudaStreamSynchronize(this->stream_));
        std::vector<T> got(n);
        CHECK_CUDA(cudaMemcpy(got.data(), dst, n * sizeof(T), cudaMemcpyDeviceToHost));
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_TRUE(same_result(got[i], expected[i]))
              << "n " << n << ", offset " << offset << ", mode " << mode << ", i " << i << ": "
              << +bits_of(got[i]) << " vs " << +bits_of(expected[i]);
      }
}

TYPED_TEST(cuda_kernel_test, finalize_equals_cpu) {
  using T = typename TypeParam::value_type;
  const TypeParam op;
  std::mt19937_64 rng(std::random_device{}());
  for (std::size_t n : reduce::test::sizes)
    for (int ranks : {1, 3, 200, 256}) {
      std::vector<T> data = reduce::test::random_elements<T>(rng, n, false);
      device_array<T> d(n);
      ASSERT_TRUE(d.data);
      CHECK_CUDA(cudaMemcpy(d.data, data.data(), n * sizeof(T), cudaMemcpyHostToDevice));
      reduce::cuda::finalize(op, d.data, n, ranks, this->stream_);
      CHECK_CUDA(cudaStreamSynchronize(this->stream_));
      reduce::cpu::finalize(op, data.data(), n, ranks);
      std::vector<T> got(n);
      CHECK_CUDA(cudaMemcpy(got.data(), d.data, n * sizeof(T), cudaMemcpyDeviceToHost));
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_result(got[i], data[i])) << "n " << n << ", ranks " << ranks << ", i " << i;
    }
}

// One pass over 1 to 8 sources into as many destinations, each its own source or apart:
// every destination equals the CPU's fold of the sources in order, then finalized.
TYPED_TEST(cuda_kernel_test, reduce_many_equals_cpu) {
  using T = typename TypeParam::value_type;
  const TypeParam op;
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  std::vector<std::size_t> sizes(std::begin(reduce::test::sizes), std::end(reduce::test::sizes));
  sizes.push_back((std::size_t{1} << 20) + 3);
  for (std::size_t n : sizes)
    for (int ranks : {1, 2, 3, 8})
      for (std::size_t offset : {0, 1})
        for (bool in_place : {true, false}) {
          std::vector<std::vector<T>> inputs;
          std::vector<T> expected(n);
          for (int r = 0; r < ranks; ++r) {
            inputs.push_back(reduce::test::random_elements<T>(rng, n, false));
            if (r == 0) expected = inputs[0];
            else reduce::cpu::combine(op, expected.data(), expected.data(), inputs.back().data(), n);
          }
          reduce::cpu::finalize(op, expected.data(), n, ranks);
          std::vector<std::unique_ptr<device_array<T>>> sources, apart;
          reduce::cuda::many_operands<T> m;
          m.sources = m.destinations = ranks;
          for (int r = 0; r < ranks; ++r) {
            sources.push_back(std::make_unique<device_array<T>>(n));
            apart.push_back(std::make_unique<device_array<T>>(n));
            ASSERT_TRUE(sources.back()->data && apart.back()->data);
            m.src[r] = sources.back()->data + offset;
            m.dst[r] = in_place ? sources.back()->data + offset : apart.back()->data + offset;
            CHECK_CUDA(cudaMemcpy(sources.back()->data + offset, inputs[std::size_t(r)].data(), n * sizeof(T),
                                  cudaMemcpyHostToDevice));
          }
          reduce::cuda::reduce_many(op, m, n, ranks, this->stream_);
          CHECK_CUDA(cudaStreamSynchronize(this->stream_));
          for (int r = 0; r < ranks; ++r) {
            std::vector<T> got(n);
            CHECK_CUDA(cudaMemcpy(got.data(), m.dst[r], n * sizeof(T), cudaMemcpyDeviceToHost));
            for (std::size_t i = 0; i < n; ++i)
              ASSERT_TRUE(same_result(got[i], expected[i]))
                  << "n " << n << ", ranks " << ranks << ", offset " << offset << ", in place " << in_place
                  << ", destination " << r << ", i " << i;
          }
        }
}

TYPED_TEST(cuda_kernel_test, a_failed_launch_names_the_cuda_error) {
  using T = typename TypeParam::value_type;
  device_array<T> d(64);
  ASSERT_TRUE(d.data);
  const reduce::cuda::launch_policy too_many_threads{.threads_per_block = 4096, .max_blocks = 1};
  try {
    reduce::cuda::combine(TypeParam{}, d.data, d.data, d.data, 64, this->stream_, too_many_threads);
    FAIL() << "launch with 4096 threads a block succeeded";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), mimatrix::errc::cuda);
    // The runtime's name for it, whichever it is: CUDA 12 says InvalidConfiguration,
    // CUDA 13 InvalidValue (seen on an H100).
    EXPECT_NE(std::string(e.what()).find("cudaError"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("64 elements"), std::string::npos) << e.what();
  }
  std::error_code ec;
  reduce::cuda::combine(TypeParam{}, d.data, d.data, d.data, 64, this->stream_, ec);
  EXPECT_FALSE(ec) << ec.message();
  CHECK_CUDA(cudaStreamSynchronize(this->stream_));
}

}  // namespace
