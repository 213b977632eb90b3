// A caller's device stream as a call's options carry it: which device::port it belongs
// to, and the port's handle of it (a cudaStream_t for CUDA). The port is in device/.
#pragma once

namespace mimatrix::device {

class port;

/// A caller's stream: the port it belongs to, and the port's handle of it. A collective
/// given one runs after the work queued there, and the work queued there after the call
/// sees its result, as with NCCL.
struct stream {
  port* device = nullptr;
  void* handle = nullptr;
};

}  // namespace mimatrix::device
