// The CUDA device port the collectives run GPU buffers through (device::cuda_port), for
// host-compiled code: the port itself is CUDA code (cuda_port.cuh), built in collective_port.cu.
#pragma once

namespace mimatrix::device {
class port;
}  // namespace mimatrix::device

namespace mimatrix::resnet::nn_cuda {

/// The process's CUDA port (the current device's): pass it with the context's stream as a
/// call's stream (call_options::stream), as train/device_gradients.hpp does.
device::port& collective_port();

}  // namespace mimatrix::resnet::nn_cuda
