// collectives: the runtime-typed entry a framework calls as it calls NCCL. The element
// type, the operation and the algorithm are values; the topology is the one type chosen.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

#include "mimatrix/communicator.hpp"
#include "mimatrix/core/config.hpp"
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/core/options.hpp"  // call_options
#include "mimatrix/detail/across_hosts.hpp"
#include "mimatrix/detail/bindings.hpp"
#include "mimatrix/detail/collectives_core.hpp"
#include "mimatrix/detail/p2p_core.hpp"
#include "mimatrix/p2p.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/topology/layout.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/transport/backend.hpp"

#if MIMATRIX_HEADER_ONLY
#include "mimatrix/algorithm/automatic.hpp"
#else
#include "mimatrix/algorithm/automatic_fwd.hpp"  // mimatrix::compiled holds it for ring, mesh and BiGraph
#endif

namespace mimatrix {

/// The collectives of one communicator with runtime types, as NCCL's calls have them.
///
/// @code
///   mimatrix::collectives<mimatrix::transport::fabric> coll(comm);
///   auto pending = coll.allreduce(grad, grad, n, mimatrix::dtype::float32, mimatrix::reduce::op_kind::sum);
///   pending.wait();
/// @endcode
///
/// Counts follow NCCL: reduce_scatter's is the elements each rank receives, allgather's
/// the elements each rank sends; gather's, scatter's and alltoall's the elements of one
/// rank's block (MPI's sendcount). Reduce, gather, scatter and alltoall run flat, also
/// across hosts. An unknown dtype, op or algorithm, or an algorithm that
/// does not run on `Topology`, is an `invalid_argument` naming the rank. With separate
/// compilation, a topology other than ring, mesh and BiGraph needs
/// "mimatrix/algorithm/automatic.hpp" included too.
///
/// @par Thread Safety
/// Like its communicator: one thread at a time, the same call order on every rank.
template <transport::backend Transport, topology::layout Topology = topology::ring>
class collectives {
 public:
  explicit collectives(communicator<Transport>& comm, Topology topo = {})
      : comm_(comm),
        core_(comm.state(), detail::face_of(comm.transport()), std::make_shared<const Topology>(std::move(topo)),
              &detail::automatic_on<Topology>, detail::suggestion_of(comm.transport())),
        p2p_(comm.state(), detail::face_of(comm.transport())) {}

  /// On device buffers over ranks of several hosts that reach the device memory of their
  /// own host's ranks only, and with no algorithm named: within each host through that
  /// memory, across the hosts a share a rank (detail/across_hosts.hpp). The first such
  /// call (of allreduce, reduce-scatter, allgather or broadcast) splits the communicator
  /// by host, on every rank.
  [[nodiscard]] request allreduce(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op,
                                  const call_options& options = {}) {
    if constexpr (splits_by_host)
      if (auto* across = across_hosts_for(options))
        return across->allreduce(core_, input, output, count, type, op, options);
    return core_.allreduce(input, output, count, type, op, options);
  }
  /// Across hosts as allreduce where ranks are numbered host by host.
  [[nodiscard]] request reduce_scatter(const void* input, void* output, std::size_t count, dtype type,
                                       reduce::op_kind op, const call_options& options = {}) {
    if constexpr (splits_by_host)
      if (auto* across = across_hosts_for(options); across && across->gathers())
        return across->reduce_scatter(core_, input, output, count, type, op, options);
    return core_.reduce_scatter(input, output, count, type, op, options);
  }
  /// Across hosts as allreduce where ranks are numbered host by host.
  [[nodiscard]] request allgather(const void* input, void* output, std::size_t count, dtype type,
                                  const call_options& options = {}) {
    if constexpr (splits_by_host)
      if (auto* across = across_hosts_for(options); across && across->gathers())
        return across->allgather(core_, input, output, count, type, options);
    return core_.allgather(input, output, count, type, options);
  }
  /// `input` is read on `root` only (others may pass null). Across hosts as allreduce.
  [[nodiscard]] request broadcast(const void* input, void* output, std::size_t count, dtype type, int root,
                                  const call_options& options = {}) {
    if constexpr (splits_by_host)
      if (auto* across = across_hosts_for(options))
        return across->broadcast(core_, input, output, count, type, root, options);
    return core_.broadcast(input, output, count, type, root, options);
  }
  /// `output` (count elements) is written on `root` only; others may pass null. As
  /// ncclReduce and MPI_Reduce.
  [[nodiscard]] request reduce(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op,
                               int root, const call_options& options = {}) {
    return core_.reduce(input, output, count, type, op, root, options);
  }
  /// `root`'s `output` holds size() blocks of `count`, block j from rank j; others may pass
  /// null. In place, the root's input is its own block of the output. As MPI_Gather.
  [[nodiscard]] request gather(const void* input, void* output, std::size_t count, dtype type, int root,
                               const call_options& options = {}) {
    return core_.gather(input, output, count, type, root, options);
  }
  /// `root`'s `input` holds size() blocks of `count`, block j for rank j; others may pass
  /// null. In place, the root's output is its own block of the input. As MPI_Scatter.
  [[nodiscard]] request scatter(const void* input, void* output, std::size_t count, dtype type, int root,
                                const call_options& options = {}) {
    return core_.scatter(input, output, count, type, root, options);
  }
  /// `input` and `output` hold size() blocks of `count`: block j of the input goes to rank
  /// j, block j of the output comes from rank j. Never in place. As MPI_Alltoall and
  /// c10d's all_to_all_single with equal splits.
  [[nodiscard]] request alltoall(const void* input, void* output, std::size_t count, dtype type,
                                 const call_options& options = {}) {
    return core_.alltoall(input, output, count, type, options);
  }
  /// The v-forms, as MPI's: per-rank counts and displacements in elements (a counts_view
  /// takes a std::vector or an array). Empty displacements lay the blocks back to back in
  /// rank order. They run algorithm::uneven_exchange, one message between each pair of
  /// ranks that exchange a block, and flat, also across hosts (docs/algorithms.md).
  ///
  /// MPI_Allgatherv: rank j's `counts[j]` elements land at `displs[j]` of every rank's
  /// output; this rank sends `in_count` = counts[rank]. Every rank gives the same counts.
  /// In place, the input is this rank's block of the output.
  [[nodiscard]] request allgatherv(const void* input, std::size_t in_count, void* output, counts_view counts,
                                   counts_view displs, dtype type, const call_options& options = {}) {
    return core_.allgatherv(input, in_count, output, counts, displs, type, options);
  }
  /// MPI_Reduce_scatter: the input holds size() blocks back to back, block j `counts[j]`
  /// elements; rank j's output is the reduction of block j. Every rank gives the same
  /// counts. In place, the output is this rank's block of the input.
  [[nodiscard]] request reduce_scatter_v(const void* input, void* output, counts_view counts, dtype type,
                                         reduce::op_kind op, const call_options& options = {}) {
    return core_.reduce_scatter_v(input, output, counts, type, op, options);
  }
  /// MPI_Gatherv: rank j's `in_count` elements land at `displs[j]` of the root's output,
  /// which expects `counts[j]` of them; `counts`, `displs` and `output` are read on the
  /// root only (others may pass empty spans and null).
  [[nodiscard]] request gatherv(const void* input, std::size_t in_count, void* output, counts_view counts,
                                counts_view displs, dtype type, int root, const call_options& options = {}) {
    return core_.gatherv(input, in_count, output, counts, displs, type, root, options);
  }
  /// MPI_Scatterv: `counts[j]` elements from `displs[j]` of the root's input go to rank j,
  /// whose output holds `out_count`; `input`, `counts` and `displs` are read on the root only.
  [[nodiscard]] request scatterv(const void* input, counts_view counts, counts_view displs, void* output,
                                 std::size_t out_count, dtype type, int root, const call_options& options = {}) {
    return core_.scatterv(input, counts, displs, output, out_count, type, root, options);
  }
  /// MPI_Alltoallv and c10d's all_to_all_single with split sizes: `send_counts[j]`
  /// elements from `send_displs[j]` of the input go to rank j, whose `recv_counts[this
  /// rank]` must be the same; `recv_counts[j]` from rank j land at `recv_displs[j]` of the
  /// output. Never in place.
  [[nodiscard]] request alltoallv(const void* input, counts_view send_counts, counts_view send_displs,
                                  void* output, counts_view recv_counts, counts_view recv_displs,
                                  dtype type, const call_options& options = {}) {
    return core_.alltoallv(input, send_counts, send_displs, output, recv_counts, recv_displs, type, options);
  }
  /// Persistent calls (MPI_Allreduce_init, MPI_Start): each checked and planned once, to
  /// start many times on the same buffers; persistent::start() is a fresh call's start
  /// without its checks and plan lookup. Arguments as the plain call's. They run flat,
  /// also across hosts. A bad argument throws here, naming the rank, and starts no call.
  [[nodiscard]] persistent allreduce_init(const void* input, void* output, std::size_t count, dtype type,
                                          reduce::op_kind op, const call_options& options = {}) {
    return core_.allreduce_init(input, output, count, type, op, options);
  }
  [[nodiscard]] persistent reduce_scatter_init(const void* input, void* output, std::size_t count, dtype type,
                                               reduce::op_kind op, const call_options& options = {}) {
    return core_.reduce_scatter_init(input, output, count, type, op, options);
  }
  [[nodiscard]] persistent allgather_init(const void* input, void* output, std::size_t count, dtype type,
                                          const call_options& options = {}) {
    return core_.allgather_init(input, output, count, type, options);
  }
  [[nodiscard]] persistent broadcast_init(const void* input, void* output, std::size_t count, dtype type, int root,
                                          const call_options& options = {}) {
    return core_.broadcast_init(input, output, count, type, root, options);
  }
  [[nodiscard]] persistent reduce_init(const void* input, void* output, std::size_t count, dtype type,
                                       reduce::op_kind op, int root, const call_options& options = {}) {
    return core_.reduce_init(input, output, count, type, op, root, options);
  }
  [[nodiscard]] persistent gather_init(const void* input, void* output, std::size_t count, dtype type, int root,
                                       const call_options& options = {}) {
    return core_.gather_init(input, output, count, type, root, options);
  }
  [[nodiscard]] persistent scatter_init(const void* input, void* output, std::size_t count, dtype type, int root,
                                        const call_options& options = {}) {
    return core_.scatter_init(input, output, count, type, root, options);
  }
  [[nodiscard]] persistent alltoall_init(const void* input, void* output, std::size_t count, dtype type,
                                         const call_options& options = {}) {
    return core_.alltoall_init(input, output, count, type, options);
  }
  [[nodiscard]] persistent allgatherv_init(const void* input, std::size_t in_count, void* output,
                                           counts_view counts, counts_view displs, dtype type,
                                           const call_options& options = {}) {
    return core_.allgatherv_init(input, in_count, output, counts, displs, type, options);
  }
  [[nodiscard]] persistent reduce_scatter_v_init(const void* input, void* output, counts_view counts,
                                                 dtype type, reduce::op_kind op, const call_options& options = {}) {
    return core_.reduce_scatter_v_init(input, output, counts, type, op, options);
  }
  [[nodiscard]] persistent gatherv_init(const void* input, std::size_t in_count, void* output,
                                        counts_view counts, counts_view displs, dtype type, int root,
                                        const call_options& options = {}) {
    return core_.gatherv_init(input, in_count, output, counts, displs, type, root, options);
  }
  [[nodiscard]] persistent scatterv_init(const void* input, counts_view counts, counts_view displs,
                                         void* output, std::size_t out_count, dtype type, int root,
                                         const call_options& options = {}) {
    return core_.scatterv_init(input, counts, displs, output, out_count, type, root, options);
  }
  [[nodiscard]] persistent alltoallv_init(const void* input, counts_view send_counts,
                                          counts_view send_displs, void* output,
                                          counts_view recv_counts, counts_view recv_displs,
                                          dtype type, const call_options& options = {}) {
    return core_.alltoallv_init(input, send_counts, send_displs, output, recv_counts, recv_displs, type, options);
  }
  /// Point-to-point (p2p.hpp), on host memory: starts `batch`'s sends and receives together.
  /// A bad argument (a peer out of range, a tag above 65534, a null buffer with a count,
  /// receive buffers that overlap) throws `invalid_argument` naming the rank, the op, the
  /// peer and the tag, and the peers the batch names fail at once. Ops the peer's batch
  /// lacks fail both ranks with `mismatch`, naming the peer and the tag. `options`: a
  /// deadline only (an algorithm or a tag is `invalid_argument`). An empty batch is done.
  [[nodiscard]] request start(const p2p_batch& batch, const call_options& options = {}) {
    p2p_supported();
    return p2p_.start(batch, options);
  }
  /// A batch of one send (as ncclSend, MPI_Isend); inside a group, added to its batch.
  [[nodiscard]] request send(const void* buffer, std::size_t count, dtype type, int peer, std::uint32_t tag = 0,
                             const call_options& options = {}) {
    p2p_supported();
    return p2p_.send(buffer, count, type, peer, tag, options);
  }
  /// A batch of one receive (as ncclRecv, MPI_Irecv); inside a group, added to its batch.
  [[nodiscard]] request recv(void* buffer, std::size_t count, dtype type, int peer, std::uint32_t tag = 0,
                             const call_options& options = {}) {
    p2p_supported();
    return p2p_.recv(buffer, count, type, peer, tag, options);
  }
  /// As ncclGroupStart: the sends and receives until the matching group_end() start as one
  /// batch there (groups nest). A collective inside a group is `invalid_argument` (not yet).
  void group_start() {
    p2p_supported();
    p2p_.group_start();
  }
  /// As ncclGroupEnd: the outermost starts the group's batch; inner ones return an empty request.
  [[nodiscard]] request group_end(const call_options& options = {}) {
    p2p_supported();
    return p2p_.group_end(options);
  }

  /// Returns once every rank has entered it (an allreduce of one byte).
  void barrier(const call_options& options = {}) { core_.barrier(options); }

  communicator<Transport>& comm() { return comm_; }

 private:
  static constexpr bool splits_by_host = detail::across_hosts<Transport>::splits_by_host;
  /// Called by the p2p methods: only those that are used are instantiated.
  static constexpr void p2p_supported() {
    static_assert(transport::runs_batches<Transport>,
                  "mimatrix: this transport runs no send/recv yet (p2p batches run on transport::inproc; fabric's "
                  "are the next increment)");
  }

  /// The split by host where a call with `options` runs across hosts; null where it runs
  /// flat (or where the communicator is gone: core_ then refuses the call). Called only
  /// where splits_by_host.
  detail::across_hosts<Transport>* across_hosts_for(const call_options& options) {
    if (!options.stream || !options.pinned_algorithm().empty() || !core_.communicator_open() ||
        !detail::across_hosts<Transport>::may_apply(comm_, *options.stream))
      return nullptr;
    if (!split_tried_) {
      split_tried_ = true;
      hosts_ = detail::across_hosts<Transport>::split(comm_, core_, *options.stream);
    }
    return hosts_.get();
  }

  communicator<Transport>& comm_;
  detail::collectives_core core_;
  detail::p2p_core p2p_;
  bool split_tried_ = false;
  std::unique_ptr<detail::across_hosts<Transport>> hosts_;  // after core_: its calls go first
};

}  // namespace mimatrix
