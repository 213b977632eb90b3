// What a call and its endpoint share: the posted libfabric operation a completion points
// back to, the side of a call that completions are dispatched to, the memory and per-step
// state the endpoint keeps from one call to the next, and a failure other ranks announce.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/transport/fabric/mailbox.hpp"
#include "mimatrix/transport/fabric/receive_window.hpp"

namespace mimatrix::transport::detail::fabric {

class call;

/// A posted libfabric operation. `ctx` comes first: the completion's op_context is the
/// address of this object. A call that fails orphans its requests (owner = nullptr), and
/// the endpoint reclaims each one when the provider finally completes or cancels it.
struct posted_op {
  enum class purpose : std::uint8_t { data, control_send, control_recv };

  fi_context2 ctx{};
  call* owner = nullptr;
  std::uint32_t step = 0;
  purpose what = purpose::data;
  std::vector<std::byte> payload;  // control messages only
  /// A control send: the peer (in step) and until when a dropped connection is retried.
  std::chrono::steady_clock::time_point until{};
};

/// The part of a call the endpoint talks to.
class call {
 public:
  virtual void on_complete(posted_op& r, const fi_cq_tagged_entry& e) = 0;
  virtual void on_error(posted_op& r, const fi_cq_err_entry& e) = 0;
  /// Drives the call until it ends (done or failed).
  virtual void finish() = 0;

 protected:
  ~call() = default;
};

/// A block of host memory that grows to the largest size asked of it and is then reused.
struct arena {
  struct free_aligned {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  std::unique_ptr<std::byte[], free_aligned> data;
  std::size_t bytes = 0;

  /// At least `n` bytes (their old contents are not kept).
  std::byte* reserve(std::size_t n) {
    if (n > bytes) {
      std::size_t rounded = 4096;  // powers of two: calls of nearby sizes share
      while (rounded < n) rounded *= 2;
      data.reset(static_cast<std::byte*>(::operator new[](rounded, std::align_val_t(64))));
      bytes = rounded;
    }
    return data.get();
  }
};

/// Where one step of a call stands.
struct step_state {
  posted_op* request = nullptr;    // posted and not yet completed
  std::size_t slot = 0;            // recv_reduce: its staging slot, once it has one
  local_mailboxes* box = nullptr;  // the shared-memory mailbox it moves through (null: the provider)
  bool polling = false;            // a mailbox receive looked for in every round
  std::uint32_t position = 0;      // a plain receive through the provider: its place in receive_window
};

/// A call's memory (scratch, staging) and the fabric part of its bookkeeping, kept by the
/// endpoint across calls so that the steady state allocates nothing.
struct workspace {
  arena scratch, staging;
  std::vector<step_state> state;       // per step
  std::vector<std::uint32_t> reduces;  // the recv_reduce steps, in schedule order
  std::vector<std::size_t> free_slots;
  std::vector<std::uint32_t> polls;    // mailbox receives whose dependencies are done
  std::vector<std::uint32_t> looked;   // mailbox reads: per peer and mailbox, the last poll round
  receive_window receives;             // plain receives through the provider, in schedule order
};

struct failure {
  errc code;
  std::string message;
};

}  // namespace mimatrix::transport::detail::fabric
