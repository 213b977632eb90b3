// `-G cuda`'s port: defined by cuda_device_port.cu where the perf programs are built with
// CUDA, else by no_cuda_device_port.cpp. Light on purpose: nvcc compiles it too.
#pragma once

namespace mimatrix::device {
class port;
}  // namespace mimatrix::device

namespace mimatrix::perf {

/// The CUDA port for `-G cuda`; null where the programs were built without CUDA.
device::port* cuda_device_port();

}  // namespace mimatrix::perf
