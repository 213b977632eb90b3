// What the multi-process CUDA test needs from nvcc, behind a plain C++ interface: the
// process's CUDA port, and a kernel that holds a stream (a late producer).
#pragma once

#include "mimatrix/device/port.hpp"

namespace mimatrix::test::gpu {

/// The process's CUDA port (cuda_port::instance()), or null where there is no GPU.
device::port* port_or_null();

/// Queues on `s` a kernel that spins for about `microseconds`.
void hold_stream(device::stream_handle s, int microseconds);

}  // namespace mimatrix::test::gpu
