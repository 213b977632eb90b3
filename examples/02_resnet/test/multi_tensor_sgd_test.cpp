// The GPU optimizer's chunking, run on the host: every chunk of every thread block, as the
// kernel (nn_cuda/sgd.cu) runs them, must take exactly the CPU optimizer's steps.
#include "nn_cuda/multi_tensor_sgd.hpp"

#include "nn/tensor.hpp"
#include "optim/sgd.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace MIMATRIX_UNIT_ID {

namespace rn = mimatrix::resnet;
using rn::nn_cuda::detail::sgd_chunk_elements;
using rn::nn_cuda::detail::sgd_plan;

// The kernel's loops, on the host: blocks take chunks by grid-stride, threads elements.
void run_like_the_kernel(const sgd_plan& plan, const rn::optim::sgd_settings& s, bool first, float lr,
                         unsigned blocks, unsigned threads) {
  const rn::optim::detail::sgd_coefficients c{s.weight_decay, s.momentum, 1 - s.dampening, lr};
  rn::optim::detail::with_sgd_flags(
      s.weight_decay != 0, s.momentum != 0, first, s.nesterov, [&]<bool D, bool M, bool F, bool N>() {
        for (unsigned block = 0; block < blocks; ++block)
          for (std::int64_t chunk = block; chunk < plan.chunks; chunk += blocks)
            for (unsigned t = 0; t < threads; ++t)
              rn::nn_cuda::detail::sgd_chunk<D, M, F, N>(plan.slots.data(), int(plan.slots.size()), chunk, t,
                                                          threads, c);
      });
}

struct case_ {
  std::string name;
  rn::optim::sgd_settings settings;
};

class multi_tensor_sgd : public testing::TestWithParam<case_> {};

TEST_P(multi_tensor_sgd, takes_the_cpu_optimizers_steps_bit_for_bit) {
  const auto settings = GetParam().settings;
  // Sizes around the chunk's edges, an empty one, and one of many chunks.
  const std::vector<std::int64_t> sizes = {5, 0, sgd_chunk_elements - 1, sgd_chunk_elements, sgd_chunk_elements + 1,
                                           1, 7 * sgd_chunk_elements + 300};
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<rn::nn::parameter> cpu;
  cpu.reserve(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    cpu.emplace_back("p" + std::to_string(i), dnnl::memory::dims{sizes[i]});
    for (float& x : cpu.back().value.data) x = normal(rng);
  }
  // The GPU optimizer's arrays, as host vectors: the same values, its own buffers.
  std::vector<std::vector<float>> values, grads, buffers;
  for (const auto& p : cpu) {
    values.push_back(p.value.data);
    grads.emplace_back(p.value.size());
    buffers.emplace_back(p.value.size(), 0.0f);
  }
  sgd_plan plan;
  for (std::size_t i = 0; i < cpu.size(); ++i)
    plan.add(values[i].data(), grads[i].data(), settings.momentum != 0 ? buffers[i].data() : nullptr, sizes[i]);
  std::int64_t expected_chunks = 0;
  for (auto n : sizes) expected_chunks += (n + sgd_chunk_elements - 1) / sgd_chunk_elements;
  ASSERT_EQ(plan.chunks, expected_chunks);
  ASSERT_EQ(plan.slots.size(), sizes.size() - 1);  // the empty one has none

  std::vector<rn::nn::parameter*> pointers;
  for (auto& p : cpu) pointers.push_back(&p);
  rn::optim::sgd reference(pointers, settings);
  for (int step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < cpu.size(); ++i)
      for (std::size_t k = 0; k < grads[i].size(); ++k) cpu[i].grad.data[k] = grads[i][k] = normal(rng);
    const float lr = 0.1f / float(step + 1);
    reference.step(lr);
    // Fewer blocks than chunks (grid-stride) and threads that do not divide a chunk.
    run_like_the_kernel(plan, settings, step == 0, lr, 3, 96);
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      ASSERT_EQ(values[i], cpu[i].value.data) << "parameter " << i << " (" << sizes[i] << " elements), step " << step;
      if (settings.momentum != 0) {
        const auto expected = reference.momentum_buffers()[i];
        ASSERT_EQ(buffers[i], std::vector<float>(expected.begin(), expected.end()))
            << "momentum of parameter " << i << ", step " << step;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(settings, multi_tensor_sgd,
                         testing::Values(case_{"nesterov_decay", {0.9f, 0, 5e-4f, true}},
                                         case_{"momentum_dampened", {0.8f, 0.1f, 1e-3f, false}},
                                         case_{"momentum_no_decay", {0.9f, 0, 0, false}},
                                         case_{"plain", {0, 0, 0, false}}, case_{"plain_decay", {0, 0, 1e-2f, false}}),
                         [](const auto& info) { return info.param.name; });

TEST(multi_tensor_sgd_plan, finds_each_chunks_parameter) {
  sgd_plan plan;
  std::vector<float> storage(10 * sgd_chunk_elements);
  plan.add(storage.data(), storage.data(), nullptr, 1);                           // chunk 0
  plan.add(storage.data(), storage.data(), nullptr, 3 * sgd_chunk_elements);      // 1, 2, 3
  plan.add(storage.data(), storage.data(), nullptr, sgd_chunk_elements + 1);      // 4, 5
  const int expected[] = {0, 1, 1, 1, 2, 2};
  ASSERT_EQ(plan.chunks, 6);
  for (std::int64_t chunk = 0; chunk < plan.chunks; ++chunk)
    EXPECT_EQ(rn::nn_cuda::detail::sgd_slot_of(plan.slots.data(), 3, chunk), expected[chunk]) << "chunk " << chunk;
  EXPECT_THROW(plan.add(storage.data(), storage.data(), nullptr, -1), std::invalid_argument);
}

}  // namespace
