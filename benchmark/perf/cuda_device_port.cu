// -G cuda: the perf programs' CUDA port, in a unit of its own so that nvcc compiles only
// this and the runner stays plain C++.
#include "cuda_device_port.hpp"
#include "mimatrix/device/cuda_port.cuh"

namespace mimatrix::perf {

device::port* cuda_device_port() { return &device::cuda_port::instance(); }

}  // namespace mimatrix::perf
