// What the multi-process CUDA test needs from nvcc, behind a plain C++ interface: the
// process's CUDA port, and a kernel that holds a stream (a late producer).
#pragma once

#include <cstddef>
#include <string>

#include "mimatrix/device/port.hpp"

namespace mimatrix::test::gpu {

/// The process's CUDA port (cuda_port::instance()), or null where there is no GPU.
device::port* port_or_null();

/// Why processes cannot share GPU 0 (none, or its compute mode lets one process at most);
/// "" where they can. Makes no CUDA context: the test's own would take the GPU from its ranks
/// in exclusive-process mode, and a turn from them in every mode.
std::string why_processes_cannot_share_a_gpu();

/// How many peers' blocks the process's CUDA port has open.
std::size_t imported_blocks();

/// Queues on `s` a kernel that spins for about `microseconds`.
void hold_stream(device::stream_handle s, int microseconds);

}  // namespace mimatrix::test::gpu
