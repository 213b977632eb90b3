// The endpoint's completion dispatch: progress() reads the completion queue and hands each
// completion to the call it belongs to, to the control plane, or back to the free list.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <sys/types.h>

#include "mimatrix/transport/fabric/call.hpp"
#include "mimatrix/transport/fabric/endpoint.hpp"
#include "mimatrix/transport/fabric/error.hpp"
#include "mimatrix/transport/fabric/wire.hpp"

namespace mimatrix::transport::detail::fabric {

inline bool endpoint::progress() {
  if (disabled_) return false;  // reading the queue would progress the transfers disable() stopped
  if (!backlog_.empty() && retry_controls()) return true;
  fi_cq_tagged_entry entries[16];
  const ssize_t n = watched("fi_cq_read", -1, [&] { return fi_cq_read(cq_, entries, 16); });
  if (n > 0) {
    for (ssize_t k = 0; k < n; ++k) dispatch(entries[k]);
    return true;
  }
  if (n == -FI_EAGAIN) return false;
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    if (watched("fi_cq_readerr", -1, [&] { return fi_cq_readerr(cq_, &err, 0); }) < 0) return false;
    dispatch_error(err);
    return true;
  }
  check_fabric_call(n, "fi_cq_read", provider_, {rank_});
  return false;
}

inline void endpoint::dispatch(const fi_cq_tagged_entry& e) {
  if (e.flags & FI_REMOTE_WRITE) {  // a peer's one-sided write landed: its flag
    if (e.flags & FI_REMOTE_CQ_DATA) flags_.push_back(e.data);
    return;
  }
  auto* r = static_cast<posted_op*>(e.op_context);
  switch (r->what) {
    case posted_op::purpose::data:
      if (r->owner)
        r->owner->on_complete(*r, e);
      else
        reclaim(r);
      break;
    case posted_op::purpose::control_send:
      sent_control(r);
      break;
    case posted_op::purpose::control_recv: {
      wire::control_message m;
      const bool ok = m.decode(r->payload.data(), e.len);
      if (closing_) return release(r);
      post_control_receive(r);  // repost first: the handler may send
      if (ok) on_control(m);
      break;
    }
  }
}

inline void endpoint::dispatch_error(const fi_cq_err_entry& e) {
  auto* r = static_cast<posted_op*>(e.op_context);
  if (!r) return;
  switch (r->what) {
    case posted_op::purpose::data:
      if (r->owner)
        r->owner->on_error(*r, e);
      else
        reclaim(r);
      break;
    case posted_op::purpose::control_send:
      control_send_failed(r, e.err);  // else the peer is gone; a liveness probe will say so
      break;
    case posted_op::purpose::control_recv:
      if (closing_ || e.err == FI_ECANCELED)
        release(r);
      else
        post_control_receive(r);
      break;
  }
}

}  // namespace mimatrix::transport::detail::fabric
