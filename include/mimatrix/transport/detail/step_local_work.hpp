// The step executor's local work: a local step (reduce, reduce_slots, copy, finalize) and a
// receive's landing, run on the host at once or queued on the call's device stream (and,
// for GDRAA's collectives on memory every rank reaches, as direct_collective.hpp's one pass).
// Definitions of step_executor members (step_executor.hpp includes this file last).
#pragma once

#include <cstring>

#include "mimatrix/core/error.hpp"
#include "mimatrix/transport/direct_collective.hpp"
#include "mimatrix/transport/step_executor.hpp"

namespace mimatrix::transport {

inline void step_executor::arrive(schedule::step_id id, const std::byte* data) {
  if (book_->steps[id].ready)
    consume(id, data);
  else
    book_->steps[id].arrived = true;
}

inline bool step_executor::run_local(schedule::step_id id) {
  if (!device_) {
    run_local_step(kernels_, step_at(id), mem_, plan_->desc.size);
    return true;
  }
  try {
    using direct = direct_collective::local;
    const direct how = direct_ ? direct_->run(step_at(id), mem_, *device_) : direct::not_direct;
    if (how == direct::done) return true;
    if (how == direct::not_direct) device_->run_local(step_at(id), mem_);
  } catch (const error& e) {  // a progress thread must not throw
    return device_failed(e);
  }
  if (device_steps::feeds_stream_only(*plan_, id)) return true;
  device_->then([this, id] {
    if (!finished()) complete(id);
  });
  return false;
}

inline bool step_executor::land(schedule::step_id id, const std::byte* data) {
  const schedule::step& st = step_at(id);
  if (!data) return true;
  if (device_) {
    try {
      device_->land(st, mem_, data);
    } catch (const error& e) {  // the transport's on_failure lets go of the peer's data
      return device_failed(e);
    }
    device_->then([this, id] {
      consumed(id);
      if (!finished()) complete(id);
    });
    return false;
  }
  if (st.kind == schedule::step_kind::recv_reduce)
    kernels_.combine(mem_.write(st.dst), mem_.read(st.src), data, st.dst.bytes);
  else if (st.dst.bytes)
    std::memcpy(mem_.write(st.dst), data, st.dst.bytes);
  return true;
}

inline void step_executor::consume(schedule::step_id id, const std::byte* data) {
  book_->steps[id].arrived = false;
  if (!land(id, data)) {
    book_->steps[id].posted = true;  // the transport completes it
    return;
  }
  consumed(id);
  complete(id);
}

}  // namespace mimatrix::transport
