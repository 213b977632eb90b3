// Owners of the CUDA library objects the layers hold: streams, handles and cuDNN
// descriptors, each destroyed with its library's own call; and the descriptors of a plain
// NCHW float32 tensor and an OIHW filter.
#pragma once

#include "check.hpp"
#include "tensor.hpp"

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <climits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace mimatrix::resnet::nn_cuda::detail {

template <auto Destroy>
struct destroyer {
  template <class Handle>
  void operator()(Handle h) const noexcept {
    (void)Destroy(h);  // nothing to do about a failure while tearing down
  }
};

// A library handle (a pointer to the library's struct) that `Destroy` releases.
template <class Handle, auto Destroy>
using owned = std::unique_ptr<std::remove_pointer_t<Handle>, destroyer<Destroy>>;

using tensor_descriptor = owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using filter_descriptor = owned<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using convolution_descriptor = owned<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;
using activation_descriptor = owned<cudnnActivationDescriptor_t, cudnnDestroyActivationDescriptor>;
using pooling_descriptor = owned<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor>;

// cuDNN and cuBLAS count in int.
inline int to_int(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw std::invalid_argument(std::string("mimatrix::resnet::nn_cuda: ") + what + " " + std::to_string(v) +
                                " is out of int range");
  return static_cast<int>(v);
}

// Rank 4 is N x C x H x W as is; rank 2 (N x C) is N x C x 1 x 1; rank 1 (C) is 1 x C x 1 x 1.
inline tensor_descriptor make_tensor_descriptor(const dims& shape) {
  dims nchw;
  switch (shape.size()) {
    case 1: nchw = {1, shape[0], 1, 1}; break;
    case 2: nchw = {shape[0], shape[1], 1, 1}; break;
    case 4: nchw = shape; break;
    default: throw std::invalid_argument("mimatrix::resnet::nn_cuda: tensors have rank 1, 2 or 4");
  }
  cudnnTensorDescriptor_t raw = nullptr;
  MIMATRIX_NN_CUDA_CHECK(cudnnCreateTensorDescriptor(&raw));
  tensor_descriptor desc(raw);
  MIMATRIX_NN_CUDA_CHECK(cudnnSetTensor4dDescriptor(desc.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                    to_int(nchw[0], "N"), to_int(nchw[1], "C"),
                                                    to_int(nchw[2], "H"), to_int(nchw[3], "W")));
  return desc;
}

inline filter_descriptor make_filter_descriptor(const dims& oihw) {
  cudnnFilterDescriptor_t raw = nullptr;
  MIMATRIX_NN_CUDA_CHECK(cudnnCreateFilterDescriptor(&raw));
  filter_descriptor desc(raw);
  MIMATRIX_NN_CUDA_CHECK(cudnnSetFilter4dDescriptor(desc.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                    to_int(oihw.at(0), "O"), to_int(oihw.at(1), "I"),
                                                    to_int(oihw.at(2), "kernel height"),
                                                    to_int(oihw.at(3), "kernel width")));
  return desc;
}

inline convolution_descriptor make_convolution_descriptor() {
  cudnnConvolutionDescriptor_t raw = nullptr;
  MIMATRIX_NN_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&raw));
  return convolution_descriptor(raw);
}

inline activation_descriptor make_activation_descriptor() {
  cudnnActivationDescriptor_t raw = nullptr;
  MIMATRIX_NN_CUDA_CHECK(cudnnCreateActivationDescriptor(&raw));
  return activation_descriptor(raw);
}

inline pooling_descriptor make_pooling_descriptor() {
  cudnnPoolingDescriptor_t raw = nullptr;
  MIMATRIX_NN_CUDA_CHECK(cudnnCreatePoolingDescriptor(&raw));
  return pooling_descriptor(raw);
}

// The blend factors every cuDNN call takes: output = 1 * op(inputs) + 0 * output.
inline constexpr float one = 1.0f;
inline constexpr float zero = 0.0f;

}  // namespace mimatrix::resnet::nn_cuda::detail
