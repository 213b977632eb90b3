// The nvcc half of the multi-process CUDA test (gpu_streams.hpp).
#include "gpu_streams.hpp"

#include <cuda_runtime.h>

#include "mimatrix/device/cuda_port.cuh"

namespace mimatrix::test::gpu {

namespace {
__global__ void spin_kernel(long long ns) {
  for (long long t = 0; t < ns; t += 1000) __nanosleep(1000);
}
}  // namespace

device::port* port_or_null() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return &device::cuda_port::instance();
}

std::string why_processes_cannot_share_a_gpu() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    return "no CUDA device";
  }
  int mode = cudaComputeModeDefault;
  if (cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  if (mode == cudaComputeModeExclusiveProcess) return "GPU 0 is in exclusive-process compute mode: one process at most";
  if (mode == cudaComputeModeProhibited) return "GPU 0 is in prohibited compute mode: no process may use it";
  return "";
}

std::size_t imported_blocks() { return device::cuda_port::instance().imported_blocks(); }

void hold_stream(device::stream_handle s, int microseconds) {
  spin_kernel<<<1, 1, 0, static_cast<cudaStream_t>(s)>>>(1000LL * microseconds);
}

}  // namespace mimatrix::test::gpu
