// The plain part of the runtime-typed collectives (collectives.hpp): the kernels of a
// (dtype, op), one engine per algorithm name, and the calls. Compiled once; what
// depends on the topology comes in as an automatic_source.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "mimatrix/core/config.hpp"
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/core/options.hpp"
#include "mimatrix/detail/engine_core.hpp"
#include "mimatrix/detail/uneven_layouts.hpp"  // counts_view
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/persistent.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/schedule/policy.hpp"

namespace mimatrix::detail {

/// algorithm::automatic on the topology `topology` points to, pinned to the algorithm
/// named `pinned` unless it is empty, for rank `rank` of `size`.
using automatic_source = schedule_source (*)(const void* topology, const std::string& pinned, int rank, int size,
                                             const std::optional<schedule::policy>& suggested);

/// @par Thread Safety
/// As its communicator: one thread at a time.
class collectives_core {
 public:
  MIMATRIX_DECL collectives_core(communicator_state& comm, const transport_face& transport,
                                 std::shared_ptr<const void> topology, automatic_source source,
                                 std::optional<schedule::policy> suggested);
  MIMATRIX_DECL collectives_core(collectives_core&&) noexcept;
  MIMATRIX_DECL ~collectives_core();

  MIMATRIX_DECL request allreduce(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op, const call_options& options);
  MIMATRIX_DECL persistent allreduce_init(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op, const call_options& options);
  MIMATRIX_DECL request reduce_scatter(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op, const call_options& options);
  MIMATRIX_DECL persistent reduce_scatter_init(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op, const call_options& options);
  MIMATRIX_DECL request allgather(const void* input, void* output, std::size_t count, dtype type, const call_options& options);
  MIMATRIX_DECL persistent allgather_init(const void* input, void* output, std::size_t count, dtype type, const call_options& options);
  MIMATRIX_DECL request broadcast(const void* input, void* output, std::size_t count, dtype type, int root, const call_options& options);
  MIMATRIX_DECL persistent broadcast_init(const void* input, void* output, std::size_t count, dtype type, int root, const call_options& options);
  MIMATRIX_DECL request reduce(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op, int root, const call_options& options);
  MIMATRIX_DECL persistent reduce_init(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op, int root, const call_options& options);
  MIMATRIX_DECL request gather(const void* input, void* output, std::size_t count, dtype type, int root, const call_options& options);
  MIMATRIX_DECL persistent gather_init(const void* input, void* output, std::size_t count, dtype type, int root, const call_options& options);
  MIMATRIX_DECL request scatter(const void* input, void* output, std::size_t count, dtype type, int root, const call_options& options);
  MIMATRIX_DECL persistent scatter_init(const void* input, void* output, std::size_t count, dtype type, int root, const call_options& options);
  MIMATRIX_DECL request alltoall(const void* input, void* output, std::size_t count, dtype type, const call_options& options);
  MIMATRIX_DECL persistent alltoall_init(const void* input, void* output, std::size_t count, dtype type, const call_options& options);
  // The v-forms, as MPI's: counts and displacements in elements, one per rank; no
  // displacements (an empty span) lay the blocks back to back in rank order.
  MIMATRIX_DECL request allgatherv(const void* input, std::size_t in_count, void* output, counts_view counts, counts_view displs, dtype type, const call_options& options);
  MIMATRIX_DECL persistent allgatherv_init(const void* input, std::size_t in_count, void* output, counts_view counts, counts_view displs, dtype type, const call_options& options);
  MIMATRIX_DECL request reduce_scatter_v(const void* input, void* output, counts_view counts, dtype type, reduce::op_kind op, const call_options& options);
  MIMATRIX_DECL persistent reduce_scatter_v_init(const void* input, void* output, counts_view counts, dtype type, reduce::op_kind op, const call_options& options);
  MIMATRIX_DECL request gatherv(const void* input, std::size_t in_count, void* output, counts_view counts, counts_view displs, dtype type, int root, const call_options& options);
  MIMATRIX_DECL persistent gatherv_init(const void* input, std::size_t in_count, void* output, counts_view counts, counts_view displs, dtype type, int root, const call_options& options);
  MIMATRIX_DECL request scatterv(const void* input, counts_view counts, counts_view displs, void* output, std::size_t out_count, dtype type, int root, const call_options& options);
  MIMATRIX_DECL persistent scatterv_init(const void* input, counts_view counts, counts_view displs, void* output, std::size_t out_count, dtype type, int root, const call_options& options);
  MIMATRIX_DECL request alltoallv(const void* input, counts_view send_counts, counts_view send_displs, void* output, counts_view recv_counts, counts_view recv_displs, dtype type, const call_options& options);
  MIMATRIX_DECL persistent alltoallv_init(const void* input, counts_view send_counts, counts_view send_displs, void* output, counts_view recv_counts, counts_view recv_displs, dtype type, const call_options& options);
  MIMATRIX_DECL void barrier(const call_options& options);
  /// This rank will not make its next call, which its peers make as a `kind`: each fails
  /// it at once with `invalid_argument` and `why`, rather than waiting out its deadline,
  /// and the calls after it still pair up (the parts of a composed call that this rank
  /// cannot start, detail/across_hosts.hpp).
  MIMATRIX_DECL void refuse(schedule::collective kind, const std::string& why);

  /// Whether the communicator it was made on still exists; its calls refuse once not.
  MIMATRIX_DECL bool communicator_open() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace mimatrix::detail

#if MIMATRIX_HEADER_ONLY
#include "mimatrix/detail/impl/collectives_core.ipp"
#endif
