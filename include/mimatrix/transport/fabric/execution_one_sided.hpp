// A fabric execution's one-sided path: the call's memory in this rank's half of the RMA
// window, writes (and notifies) with the call's flag as remote CQ data, and the flags
// peers raised for it.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_rma.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/transport/fabric/execution.hpp"
#include "mimatrix/transport/fabric/window.hpp"
#include "mimatrix/transport/fabric/wire.hpp"

namespace mimatrix::transport::detail::fabric {

inline void execution::use_window() {
  const std::size_t need = scratch_offset() + plan().scratch_bytes;
  if (ep_->window_half_bytes() < need)
    throw error(errc::invalid_argument,
                "transport::fabric: a one-sided call needs " + std::to_string(need) +
                    " bytes of RMA window but each half has " + std::to_string(ep_->window_half_bytes()) +
                    " (MIMATRIX_WINDOW_BYTES); lower the schedule (schedule::lower_one_sided) or enlarge the window");
  half_ = ep_->begin_one_sided(this);
  mem_.output = ep_->window().half(half_);
  mem_.scratch = mem_.output + scratch_offset();
  digest_ = wire::digest(packed_);
}

inline execution::posted execution::post_write(schedule::step_id id) {
  const schedule::step& st = step_at(id);
  const std::size_t bytes = st.kind == kind::write ? st.src.bytes : 0;
  const std::size_t offset = st.kind == kind::write ? (st.dst.where == schedule::buffer::scratch ? scratch_offset() : 0) + st.dst.offset : 0;
  const std::byte* src = bytes ? mem_.read(st.src) : nullptr;
  posted_op* r = ep_->acquire(this, id);
  const window_announcement& target = ep_->peer_window(st.peer);
  const ssize_t ret = ep_->watched("fi_writedata", st.peer, [&] {
    return fi_writedata(ep_->ep(), src, bytes, bytes ? ep_->registrations().descriptor(src, bytes) : nullptr,
                        wire::flag_data(plan().rank, sig().sequence, st.tag, digest_), ep_->address(st.peer),
                        rma_window::remote_address(target, half_, offset), target.key, &r->ctx);
  });
  return posted_as(id, r, "fi_writedata", ret);
}

inline bool execution::take_flags() {
  bool changed = false;
  std::string odd;
  ep_->take_flags(static_cast<std::uint32_t>(sig().sequence) & wire::sequence_mask, [&](const wire::flag& f) {
    changed = true;
    if (f.digest != digest_) {
      if (odd.empty())
        odd = "rank " + std::to_string(f.writer) + " wrote to this rank for a call other than " + to_string(sig()) +
              " by '" + plan().algorithm + "' (another call, another algorithm, or one built on another topology)";
      return;
    }
    if (odd.empty()) raise_flag(f.tag, f.writer);
  });
  if (!odd.empty()) fail(errc::mismatch, describe(stuck_context(), odd));
  return changed;
}

}  // namespace mimatrix::transport::detail::fabric
