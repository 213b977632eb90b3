// A fabric execution's path for device buffers that the provider moves itself (FI_HMEM:
// GPUDirect RDMA on verbs or efa), as aws-ofi-nccl gives NCCL: sends read the caller's
// device memory and receives land in device staging slots, all registered with their
// interface; each copy or reduction runs on the call's stream from its slot. Nothing
// goes through host memory. Taken where the provider granted FI_HMEM, the port names
// its memory for the network, the schedule is two-sided and no mailbox carries the
// call (the CPU cannot read device memory); every rank decides alike.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/transport/fabric/execution.hpp"

namespace mimatrix::transport::detail::fabric {

inline std::size_t execution::stage_every_receive() {
  reduces_.clear();
  std::size_t slot_bytes = 0;
  const auto& steps = plan().steps;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const schedule::step& st = steps[i];
    if (st.kind != kind::recv && st.kind != kind::recv_reduce) continue;
    reduces_.push_back(static_cast<schedule::step_id>(i));
    slot_bytes = std::max(slot_bytes, (st.dst.bytes + 255) / 256 * 256);
  }
  return slot_bytes;
}

inline bool execution::register_device_buffers() {
  const auto& d = plan().desc;
  const struct {
    const char* name;
    const std::byte* data;
    std::size_t bytes;
  } buffers[] = {{"input", mem_.input, d.input_bytes(plan().rank)},
                 {"output", mem_.output, d.output_bytes(plan().rank)},
                 {"scratch", mem_.scratch, mem_.scratch ? scratch_end() + slot_bytes_ * free_slots_.size() : 0}};
  for (const auto& b : buffers) {
    if (!b.data || !b.bytes) continue;
    try {
      (void)descriptor(b.data, b.bytes);
    } catch (const error& e) {
      const bool cuda = port_memory_.iface == device::network_memory::interface::cuda;
      fail(errc::transport,
           "rank " + std::to_string(plan().rank) + ": " + to_string(sig()) + " cannot register its " + b.name +
               " device buffer (" + (cuda ? "FI_HMEM_CUDA, device " + std::to_string(port_memory_.device) : "FI_HMEM_SYSTEM") +
               ") with provider '" + ep_->provider() + "': " + e.what() +
               (cuda ? "; libfabric needs CUDA support for that" : "") +
               " (MIMATRIX_DEVICE_HMEM=0 on every rank stages device buffers through host memory)");
      return false;
    }
  }
  return true;
}

}  // namespace mimatrix::transport::detail::fabric
