// collective_port(): device::cuda_port, in a unit of its own so the trainer stays host C++.
#include "collective_port.hpp"

#include <mimatrix/device/cuda_port.cuh>

namespace mimatrix::resnet::nn_cuda {

device::port& collective_port() { return device::cuda_port::instance(); }

}  // namespace mimatrix::resnet::nn_cuda
