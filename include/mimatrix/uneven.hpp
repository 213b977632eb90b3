// The typed v-forms (MPI's allgatherv, reduce_scatter with counts, gatherv, scatterv and
// alltoallv): per-rank counts and displacements in elements, one buffer a std::span of T.
// Each runs algorithm::uneven_exchange, so they name no topology or algorithm.
#pragma once

#include <span>
#include <string>

#include "mimatrix/communicator.hpp"
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/options.hpp"
#include "mimatrix/detail/bindings.hpp"
#include "mimatrix/detail/collective_engine.hpp"  // kernels_of
#include "mimatrix/detail/engine_core.hpp"
#include "mimatrix/detail/uneven_layouts.hpp"
#include "mimatrix/persistent.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix {
namespace detail {

/// The plain engine of a typed v-form: the call's layout comes with each call.
template <transport::backend Transport>
class uneven_engine {
 public:
  explicit uneven_engine(communicator<Transport>& comm)
      : rank_(comm.rank()), size_(comm.size()), core_(comm.state(), face_of(comm.transport()), schedule_source{}) {}

  int rank() const { return rank_; }
  int size() const { return size_; }

  template <reduce::operation Op>
  request start(schedule::collective kind, const typename Op::value_type* in, typename Op::value_type* out,
                const uneven_args& args, int root, const Op&, const call_options& options) {
    refuse_pinned(options);
    return core_.start_uneven(kind, in, out, args, root, kernels_of<Op>(), options.timeout,
                              options.stream ? &*options.stream : nullptr, options.tag);
  }
  template <reduce::operation Op>
  persistent prepare(schedule::collective kind, const typename Op::value_type* in, typename Op::value_type* out,
                     const uneven_args& args, int root, const Op&, const call_options& options) {
    refuse_pinned(options);
    return persistent(core_, core_.prepare_uneven(kind, in, out, args, root, kernels_of<Op>(), options.timeout,
                                                  options.stream ? &*options.stream : nullptr, options.tag));
  }

 private:
  /// Before the call takes a sequence number, as collective_engine's: ranks stay in step.
  void refuse_pinned(const call_options& options) const {
    if (!options.pinned_algorithm().empty())
      throw error(errc::invalid_argument, "rank " + std::to_string(rank_) + ": a typed v-form runs "
                                          "algorithm::uneven_exchange; call_options::algorithm ('" +
                                          options.algorithm + "') is for collectives<>");
  }

  int rank_, size_;
  engine_core core_;
};

}  // namespace detail

/// MPI_Allgatherv: rank j's input (counts[j] elements) lands at displs[j] of every rank's
/// output. Every rank gives the same counts; no displacements lay the blocks back to back.
///
/// @par Thread Safety
/// Like its communicator: one thread at a time, the same call order on every rank.
template <transport::backend Transport, element T>
class allgatherv {
 public:
  using value_type = T;
  explicit allgatherv(communicator<Transport>& comm) : engine_(comm) {}

  [[nodiscard]] request start(std::span<const T> input, std::span<T> output, counts_view counts,
                              counts_view displs = {}, const call_options& options = {}) {
    return engine_.start(schedule::collective::allgather, input.data(), output.data(), args(input, counts, displs), 0,
                         reduce::sum<T>{}, options);
  }
  [[nodiscard]] persistent prepare(std::span<const T> input, std::span<T> output, counts_view counts,
                                   counts_view displs = {}, const call_options& options = {}) {
    return engine_.prepare(schedule::collective::allgather, input.data(), output.data(), args(input, counts, displs),
                           0, reduce::sum<T>{}, options);
  }
  void operator()(std::span<const T> input, std::span<T> output, counts_view counts, counts_view displs = {}) {
    start(input, output, counts, displs).wait();
  }

 private:
  detail::uneven_args args(std::span<const T> input, counts_view counts, counts_view displs) const {
    return detail::allgatherv_layout(engine_.rank(), engine_.size(), input.size(), counts, displs);
  }
  detail::uneven_engine<Transport> engine_;
};

/// MPI_Reduce_scatter: the input holds the blocks back to back (block j counts[j]
/// elements); rank j's output is the reduction by `Op` of block j. Every rank gives the
/// same counts.
///
/// @par Thread Safety
/// Like its communicator: one thread at a time, the same call order on every rank.
template <transport::backend Transport, reduce::operation Op>
class reduce_scatter_v {
 public:
  using value_type = typename Op::value_type;
  explicit reduce_scatter_v(communicator<Transport>& comm) : engine_(comm) {}

  [[nodiscard]] request start(std::span<const value_type> input, std::span<value_type> output, counts_view counts,
                              const call_options& options = {}) {
    return engine_.start(schedule::collective::reduce_scatter, input.data(), output.data(),
                         detail::reduce_scatter_v_layout(engine_.size(), counts), 0, Op{}, options);
  }
  [[nodiscard]] persistent prepare(std::span<const value_type> input, std::span<value_type> output,
                                   counts_view counts, const call_options& options = {}) {
    return engine_.prepare(schedule::collective::reduce_scatter, input.data(), output.data(),
                           detail::reduce_scatter_v_layout(engine_.size(), counts), 0, Op{}, options);
  }
  void operator()(std::span<const value_type> input, std::span<value_type> output, counts_view counts) {
    start(input, output, counts).wait();
  }

 private:
  detail::uneven_engine<Transport> engine_;
};

/// MPI_Gatherv: each rank's input lands at displs[j] of the root's output, which expects
/// counts[j] elements from rank j; counts, displs and output are read on the root only.
///
/// @par Thread Safety
/// Like its communicator: one thread at a time, the same call order on every rank.
template <transport::backend Transport, element T>
class gatherv {
 public:
  using value_type = T;
  explicit gatherv(communicator<Transport>& comm) : engine_(comm) {}

  [[nodiscard]] request start(std::span<const T> input, std::span<T> output, counts_view counts,
                              counts_view displs, int root, const call_options& options = {}) {
    return engine_.start(schedule::collective::gather, input.data(), mine(root) ? output.data() : nullptr,
                         detail::gatherv_layout(engine_.rank(), engine_.size(), input.size(), counts, displs, root),
                         root, reduce::sum<T>{}, options);
  }
  void operator()(std::span<const T> input, std::span<T> output, counts_view counts, counts_view displs, int root) {
    start(input, output, counts, displs, root).wait();
  }

 private:
  bool mine(int root) const { return engine_.rank() == root; }
  detail::uneven_engine<Transport> engine_;
};

/// MPI_Scatterv: counts[j] elements from displs[j] of the root's input go to rank j, whose
/// output holds them; input, counts and displs are read on the root only.
///
/// @par Thread Safety
/// Like its communicator: one thread at a time, the same call order on every rank.
template <transport::backend Transport, element T>
class scatterv {
 public:
  using value_type = T;
  explicit scatterv(communicator<Transport>& comm) : engine_(comm) {}

  [[nodiscard]] request start(std::span<const T> input, counts_view counts, counts_view displs, std::span<T> output,
                              int root, const call_options& options = {}) {
    return engine_.start(schedule::collective::scatter, engine_.rank() == root ? input.data() : nullptr,
                         output.data(),
                         detail::scatterv_layout(engine_.rank(), engine_.size(), counts, displs, output.size(), root),
                         root, reduce::sum<T>{}, options);
  }
  void operator()(std::span<const T> input, counts_view counts, counts_view displs, std::span<T> output, int root) {
    start(input, counts, displs, output, root).wait();
  }

 private:
  detail::uneven_engine<Transport> engine_;
};

/// MPI_Alltoallv, c10d's all_to_all_single with split sizes: send_counts[j] elements from
/// send_displs[j] of the input go to rank j; recv_counts[j] from rank j land at
/// recv_displs[j] of the output. No displacements: back to back. Never in place.
///
/// @par Thread Safety
/// Like its communicator: one thread at a time, the same call order on every rank.
template <transport::backend Transport, element T>
class alltoallv {
 public:
  using value_type = T;
  explicit alltoallv(communicator<Transport>& comm) : engine_(comm) {}

  [[nodiscard]] request start(std::span<const T> input, counts_view send_counts, std::span<T> output,
                              counts_view recv_counts, counts_view send_displs = {}, counts_view recv_displs = {},
                              const call_options& options = {}) {
    return engine_.start(schedule::collective::alltoall, input.data(), output.data(),
                         detail::alltoallv_layout(engine_.rank(), engine_.size(), send_counts, send_displs,
                                                  recv_counts, recv_displs),
                         0, reduce::sum<T>{}, options);
  }
  [[nodiscard]] persistent prepare(std::span<const T> input, counts_view send_counts, std::span<T> output,
                                   counts_view recv_counts, counts_view send_displs = {},
                                   counts_view recv_displs = {}, const call_options& options = {}) {
    return engine_.prepare(schedule::collective::alltoall, input.data(), output.data(),
                           detail::alltoallv_layout(engine_.rank(), engine_.size(), send_counts, send_displs,
                                                    recv_counts, recv_displs),
                           0, reduce::sum<T>{}, options);
  }
  void operator()(std::span<const T> input, counts_view send_counts, std::span<T> output, counts_view recv_counts) {
    start(input, send_counts, output, recv_counts).wait();
  }

 private:
  detail::uneven_engine<Transport> engine_;
};

}  // namespace mimatrix
