// The plain part of point-to-point calls (p2p.hpp): checks with messages that name the
// rank, the op, the peer and the tag, the pair epochs, the batch's schedule, groups, and
// the hand-off to the transport (transport::runs_batches). Compiled once, as engine_core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "mimatrix/core/config.hpp"
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/core/options.hpp"
#include "mimatrix/detail/engine_core.hpp"  // transport_face
#include "mimatrix/p2p.hpp"
#include "mimatrix/request.hpp"

namespace mimatrix::detail {

class communicator_state;

/// @par Thread Safety
/// As its communicator: one thread at a time.
class p2p_core {
 public:
  MIMATRIX_DECL p2p_core(communicator_state& comm, const transport_face& transport);
  MIMATRIX_DECL p2p_core(p2p_core&&) noexcept;
  MIMATRIX_DECL ~p2p_core();

  /// Checks `batch`, takes its pair epochs and starts it; an empty batch is done at once
  /// and takes none. A bad argument fails the peers it names at once, then throws
  /// `invalid_argument` (a send and a receive of this rank to itself that differ:
  /// `mismatch`). Inside a group: `invalid_argument` (add to the group with send/recv).
  MIMATRIX_DECL request start(const p2p_batch& batch, const call_options& options);
  /// A batch of one, or, inside a group, an op added to the group's batch (an empty request).
  MIMATRIX_DECL request send(const void* buffer, std::size_t count, dtype type, int peer, std::uint32_t tag,
                             const call_options& options);
  MIMATRIX_DECL request recv(void* buffer, std::size_t count, dtype type, int peer, std::uint32_t tag,
                             const call_options& options);
  /// Opens a group (they nest, by a count, as NCCL's): send and recv until the outermost
  /// group_end() make one batch. Collectives are refused inside a group for now.
  MIMATRIX_DECL void group_start();
  /// Closes a group; the outermost starts its batch (its options: the last group_end's).
  MIMATRIX_DECL request group_end(const call_options& options);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace mimatrix::detail

#if MIMATRIX_HEADER_ONLY
#include "mimatrix/detail/impl/p2p_core.ipp"
#endif
