// SGD over every parameter of a network in one kernel launch (as apex's multi_tensor_apply):
// the parameters are cut into chunks, one chunk a thread block. Plain C++ that nvcc also
// compiles for the device, so the chunking is tested on the host (caching_pool_test's
// directory: test/multi_tensor_sgd_test.cpp) and the kernel (sgd.cu) only loops over it.
#pragma once

#include "optim/sgd_rule.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace mimatrix::resnet::nn_cuda::detail {

/// One parameter's arrays (device memory on a GPU) and where its chunks start.
struct sgd_slot {
  float* value;
  const float* grad;
  float* buf;  // null without momentum
  std::int64_t size;
  std::int64_t first_chunk;
};

/// Elements a chunk (a thread block's share): large enough that a block's threads each take
/// several, small enough that ResNet-20's 272 thousand parameters still fill an H100.
inline constexpr std::int64_t sgd_chunk_elements = 2048;

/// The slots of `arrays` (value, grad, buf, size each), their chunks numbered one after
/// another; `chunks` is their total. A parameter of 0 elements gets no chunk.
struct sgd_plan {
  std::vector<sgd_slot> slots;
  std::int64_t chunks = 0;

  void add(float* value, const float* grad, float* buf, std::int64_t size) {
    if (size < 0) throw std::invalid_argument("nn_cuda::sgd: a parameter of " + std::to_string(size) + " elements");
    if (size == 0) return;
    slots.push_back({value, grad, buf, size, chunks});
    chunks += (size + sgd_chunk_elements - 1) / sgd_chunk_elements;
  }
};

/// The slot that holds `chunk` (< the plan's chunks): the last one starting at or before it.
MIMATRIX_RESNET_HOST_DEVICE inline int sgd_slot_of(const sgd_slot* slots, int count, std::int64_t chunk) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (slots[mid].first_chunk <= chunk)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// Thread `thread` of `threads` updates its elements of `chunk`.
template <bool Decay, bool Momentum, bool First, bool Nesterov>
MIMATRIX_RESNET_HOST_DEVICE inline void sgd_chunk(const sgd_slot* slots, int count, std::int64_t chunk,
                                                  unsigned thread, unsigned threads,
                                                  optim::detail::sgd_coefficients c) {
  const sgd_slot& s = slots[sgd_slot_of(slots, count, chunk)];
  const std::int64_t begin = (chunk - s.first_chunk) * sgd_chunk_elements;
  const std::int64_t end = begin + sgd_chunk_elements < s.size ? begin + sgd_chunk_elements : s.size;
  for (std::int64_t i = begin + thread; i < end; i += threads) {
    float v = s.value[i], b = 0;
    if constexpr (Momentum) b = s.buf[i];
    optim::detail::sgd_element<Decay, Momentum, First, Nesterov>(v, s.grad[i], b, c);
    s.value[i] = v;
    if constexpr (Momentum) s.buf[i] = b;
  }
}

}  // namespace mimatrix::resnet::nn_cuda::detail
