// collectives_core's definitions: in every unit when header-only, once with separate
// compilation.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>

#include "mimatrix/core/error.hpp"
#include "mimatrix/detail/collectives_core.hpp"
#include "mimatrix/algorithm/uneven_exchange.hpp"
#include "mimatrix/detail/communicator_state.hpp"
#include "mimatrix/detail/uneven_layouts.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"

namespace mimatrix::detail {

struct collectives_core::impl {
  /// The kernels of (type, op) for a `kind`; an unknown one is an `invalid_argument`
  /// naming the rank, and this rank's peers fail the call at once.
  const reduce::host_kernels& kernels(schedule::collective kind, dtype type, reduce::op_kind op) {
    try {
      return reduce::host_kernels_for(type, op);
    } catch (const error& e) {
      const std::string why = "rank " + std::to_string(transport.rank) + ": " + e.reason();
      refuse(kind, why);
      throw error(errc::invalid_argument, why);
    }
  }
  void refuse(schedule::collective kind, const std::string& why) {
    refuse_if_destroyed(alive, transport.rank, schedule::to_string(kind));
    signature sig;
    sig.kind = kind;
    sig.sequence = comm.take_sequence(transport.rank, transport.progress);
    transport.fail(transport.transport, sig, errc::invalid_argument, why);
  }

  /// One engine (and plan-cache owner) per algorithm name, made on first use; a call on
  /// a destroyed communicator is refused before a new engine touches it (an engine's
  /// start() refuses it too).
  engine_core& engine(schedule::collective kind, const call_options& options) {
    const std::string_view pinned = options.pinned_algorithm();
    if (auto it = engines.find(pinned); it != engines.end()) return it->second;
    refuse_if_destroyed(alive, transport.rank, schedule::to_string(kind));
    std::string name(pinned);
    schedule_source bound;
    try {
      bound = source(topology.get(), name, transport.rank, transport.size, suggested);
    } catch (const error& e) {  // an algorithm unknown, or not for the topology: the peers fail at once
      refuse(kind, e.reason());
      throw;
    }
    engine_core made(comm, transport, std::move(bound));
    return engines.emplace(std::move(name), std::move(made)).first->second;
  }

  /// A call as the engine takes it: its buffers in elements of `type` on this rank.
  struct call_shape {
    schedule::collective kind;
    const void* in;
    std::size_t in_count;
    void* out;
    std::size_t out_count;
    int root;
    dtype type;
    reduce::op_kind op;
    std::shared_ptr<const schedule::uneven> layout{};  // a v-form's blocks on this rank
    std::string problem{};                             // a v-form's arguments that cannot be
  };
  /// A v-form (`args` from detail/uneven_layouts.hpp).
  call_shape uneven_shape(schedule::collective kind, const void* input, void* output, uneven_args args, int root,
                          dtype type, reduce::op_kind op = reduce::op_kind::sum) const {
    call_shape c{kind, input, 0, output, 0, root, type, op};
    c.layout = std::move(args.layout);
    c.problem = std::move(args.problem);
    return c;
  }
  /// What is wrong with v-form `c` as `options` asks for it: its arguments, or an
  /// algorithm named that does not run it.
  std::string uneven_problem(const call_shape& c, const call_options& options) const {
    const std::string_view pinned = options.pinned_algorithm(), runs = algorithm::uneven_exchange::name_for(c.kind);
    if (c.problem.empty() && !pinned.empty() && pinned != runs)
      return "call_options::algorithm names '" + std::string(pinned) + "', but " + std::string(schedule::call_name(c.kind, true)) +
             " runs '" + std::string(runs) + "' only";
    return c.problem;
  }

  call_shape allreduce_shape(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op) const {
    return {schedule::collective::allreduce, input, count, output, count, 0, type, op};
  }
  call_shape reduce_scatter_shape(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op) const {
    return {schedule::collective::reduce_scatter, input, count * size(), output, count, 0, type, op};
  }
  call_shape allgather_shape(const void* input, void* output, std::size_t count, dtype type) const {
    return {schedule::collective::allgather, input, count, output, count * size(), 0, type, reduce::op_kind::sum};
  }
  call_shape broadcast_shape(const void* input, void* output, std::size_t count, dtype type, int root) const {
    return {schedule::collective::broadcast, input, is(root) ? count : 0, output, count, root, type, reduce::op_kind::sum};
  }
  call_shape reduce_shape(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op, int root) const {
    return {schedule::collective::reduce, input, count, is(root) ? output : nullptr, is(root) ? count : 0, root, type, op};
  }
  call_shape gather_shape(const void* input, void* output, std::size_t count, dtype type, int root) const {
    return {schedule::collective::gather, input, count, is(root) ? output : nullptr, is(root) ? count * size() : 0, root, type,
            reduce::op_kind::sum};
  }
  call_shape scatter_shape(const void* input, void* output, std::size_t count, dtype type, int root) const {
    return {schedule::collective::scatter, is(root) ? input : nullptr, is(root) ? count * size() : 0, output, count, root, type,
            reduce::op_kind::sum};
  }
  call_shape alltoall_shape(const void* input, void* output, std::size_t count, dtype type) const {
    return {schedule::collective::alltoall, input, count * size(), output, count * size(), 0, type, reduce::op_kind::sum};
  }

  call_shape allgatherv_shape(const void* input, std::size_t in_count, void* output, counts_view counts, counts_view displs, dtype type) const {
    return uneven_shape(schedule::collective::allgather, input, output, allgatherv_layout(rank(), p(), in_count, counts, displs), 0, type);
  }
  call_shape reduce_scatter_v_shape(const void* input, void* output, counts_view counts, dtype type, reduce::op_kind op) const {
    return uneven_shape(schedule::collective::reduce_scatter, input, output, reduce_scatter_v_layout(p(), counts), 0, type, op);
  }
  call_shape gatherv_shape(const void* input, std::size_t in_count, void* output, counts_view counts, counts_view displs, dtype type, int root) const {
    return uneven_shape(schedule::collective::gather, input, is(root) ? output : nullptr,
                        gatherv_layout(rank(), p(), in_count, counts, displs, root), root, type);
  }
  call_shape scatterv_shape(const void* input, counts_view counts, counts_view displs, void* output, std::size_t out_count, dtype type, int root) const {
    return uneven_shape(schedule::collective::scatter, is(root) ? input : nullptr, output,
                        scatterv_layout(rank(), p(), counts, displs, out_count, root), root, type);
  }
  call_shape alltoallv_shape(const void* input, counts_view send_counts, counts_view send_displs, void* output, counts_view recv_counts, counts_view recv_displs, dtype type) const {
    return uneven_shape(schedule::collective::alltoall, input, output,
                        alltoallv_layout(rank(), p(), send_counts, send_displs, recv_counts, recv_displs), 0, type);
  }

  /// Starts `c` with the engine of the call's algorithm.
  request start(const call_shape& c, const call_options& options) {
    if (c.layout || !c.problem.empty()) return start_uneven(c, options);
    return engine(c.kind, options)
        .start(c.kind, c.in, c.in_count, c.out, c.out_count, c.root, kernels(c.kind, c.type, c.op), options.timeout,
               options.stream ? &*options.stream : nullptr, options.tag);
  }
  /// Checks and plans `c` once, for a persistent call; a bad argument throws here and
  /// starts no call (the peers are not told).
  /// A v-form runs algorithm::uneven_exchange, on the engine of no algorithm named.
  request start_uneven(const call_shape& c, const call_options& options) {
    const reduce::host_kernels& k = kernels(c.kind, c.type, c.op);
    return engine(c.kind, {}).start_uneven(c.kind, c.in, c.out, {c.layout, uneven_problem(c, options)}, c.root, k,
                                           options.timeout, options.stream ? &*options.stream : nullptr, options.tag);
  }
  persistent prepare(const call_shape& c, const call_options& options) {
    const reduce::host_kernels& k = reduce::host_kernels_for(c.type, c.op);  // throws naming the bad one
    if (c.layout || !c.problem.empty()) {
      engine_core& e = engine(c.kind, {});
      return persistent(e, e.prepare_uneven(c.kind, c.in, c.out, {c.layout, uneven_problem(c, options)}, c.root, k,
                                            options.timeout, options.stream ? &*options.stream : nullptr,
                                            options.tag));
    }
    engine_core& e = engine(c.kind, options);
    return persistent(e, e.prepare(c.kind, c.in, c.in_count, c.out, c.out_count, c.root, k, options.timeout,
                                   options.stream ? &*options.stream : nullptr, options.tag));
  }
  std::size_t size() const { return std::size_t(transport.size); }
  int p() const { return transport.size; }
  int rank() const { return transport.rank; }
  bool is(int rank) const { return transport.rank == rank; }

  communicator_state& comm;
  std::weak_ptr<const void> alive;  // comm's
  transport_face transport;
  std::shared_ptr<const void> topology;
  automatic_source source;
  std::optional<schedule::policy> suggested;
  std::map<std::string, engine_core, std::less<>> engines;
};

MIMATRIX_DECL collectives_core::collectives_core(communicator_state& comm, const transport_face& transport,
                                                 std::shared_ptr<const void> topology, automatic_source source,
                                                 std::optional<schedule::policy> suggested)
    : impl_(std::make_unique<impl>(impl{comm, comm.liveness(), transport, std::move(topology), source, suggested, {}})) {}

MIMATRIX_DECL collectives_core::collectives_core(collectives_core&&) noexcept = default;
MIMATRIX_DECL bool collectives_core::communicator_open() const { return !impl_->alive.expired(); }
MIMATRIX_DECL collectives_core::~collectives_core() = default;

MIMATRIX_DECL request collectives_core::allreduce(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op, const call_options& options) {
  return impl_->start(impl_->allreduce_shape(input, output, count, type, op), options);
}

MIMATRIX_DECL persistent collectives_core::allreduce_init(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op, const call_options& options) {
  return impl_->prepare(impl_->allreduce_shape(input, output, count, type, op), options);
}

MIMATRIX_DECL request collectives_core::reduce_scatter(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op, const call_options& options) {
  return impl_->start(impl_->reduce_scatter_shape(input, output, count, type, op), options);
}

MIMATRIX_DECL persistent collectives_core::reduce_scatter_init(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op, const call_options& options) {
  return impl_->prepare(impl_->reduce_scatter_shape(input, output, count, type, op), options);
}

MIMATRIX_DECL request collectives_core::allgather(const void* input, void* output, std::size_t count, dtype type, const call_options& options) {
  return impl_->start(impl_->allgather_shape(input, output, count, type), options);
}

MIMATRIX_DECL persistent collectives_core::allgather_init(const void* input, void* output, std::size_t count, dtype type, const call_options& options) {
  return impl_->prepare(impl_->allgather_shape(input, output, count, type), options);
}

MIMATRIX_DECL request collectives_core::broadcast(const void* input, void* output, std::size_t count, dtype type, int root, const call_options& options) {
  return impl_->start(impl_->broadcast_shape(input, output, count, type, root), options);
}

MIMATRIX_DECL persistent collectives_core::broadcast_init(const void* input, void* output, std::size_t count, dtype type, int root, const call_options& options) {
  return impl_->prepare(impl_->broadcast_shape(input, output, count, type, root), options);
}

MIMATRIX_DECL request collectives_core::reduce(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op, int root, const call_options& options) {
  return impl_->start(impl_->reduce_shape(input, output, count, type, op, root), options);
}

MIMATRIX_DECL persistent collectives_core::reduce_init(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op, int root, const call_options& options) {
  return impl_->prepare(impl_->reduce_shape(input, output, count, type, op, root), options);
}

MIMATRIX_DECL request collectives_core::gather(const void* input, void* output, std::size_t count, dtype type, int root, const call_options& options) {
  return impl_->start(impl_->gather_shape(input, output, count, type, root), options);
}

MIMATRIX_DECL persistent collectives_core::gather_init(const void* input, void* output, std::size_t count, dtype type, int root, const call_options& options) {
  return impl_->prepare(impl_->gather_shape(input, output, count, type, root), options);
}

MIMATRIX_DECL request collectives_core::scatter(const void* input, void* output, std::size_t count, dtype type, int root, const call_options& options) {
  return impl_->start(impl_->scatter_shape(input, output, count, type, root), options);
}

MIMATRIX_DECL persistent collectives_core::scatter_init(const void* input, void* output, std::size_t count, dtype type, int root, const call_options& options) {
  return impl_->prepare(impl_->scatter_shape(input, output, count, type, root), options);
}

MIMATRIX_DECL request collectives_core::alltoall(const void* input, void* output, std::size_t count, dtype type, const call_options& options) {
  return impl_->start(impl_->alltoall_shape(input, output, count, type), options);
}

MIMATRIX_DECL persistent collectives_core::alltoall_init(const void* input, void* output, std::size_t count, dtype type, const call_options& options) {
  return impl_->prepare(impl_->alltoall_shape(input, output, count, type), options);
}

MIMATRIX_DECL request collectives_core::allgatherv(const void* input, std::size_t in_count, void* output, counts_view counts, counts_view displs, dtype type, const call_options& options) {
  return impl_->start(impl_->allgatherv_shape(input, in_count, output, counts, displs, type), options);
}

MIMATRIX_DECL persistent collectives_core::allgatherv_init(const void* input, std::size_t in_count, void* output, counts_view counts, counts_view displs, dtype type, const call_options& options) {
  return impl_->prepare(impl_->allgatherv_shape(input, in_count, output, counts, displs, type), options);
}

MIMATRIX_DECL request collectives_core::reduce_scatter_v(const void* input, void* output, counts_view counts, dtype type, reduce::op_kind op, const call_options& options) {
  return impl_->start(impl_->reduce_scatter_v_shape(input, output, counts, type, op), options);
}

MIMATRIX_DECL persistent collectives_core::reduce_scatter_v_init(const void* input, void* output, counts_view counts, dtype type, reduce::op_kind op, const call_options& options) {
  return impl_->prepare(impl_->reduce_scatter_v_shape(input, output, counts, type, op), options);
}

MIMATRIX_DECL request collectives_core::gatherv(const void* input, std::size_t in_count, void* output, counts_view counts, counts_view displs, dtype type, int root, const call_options& options) {
  return impl_->start(impl_->gatherv_shape(input, in_count, output, counts, displs, type, root), options);
}

MIMATRIX_DECL persistent collectives_core::gatherv_init(const void* input, std::size_t in_count, void* output, counts_view counts, counts_view displs, dtype type, int root, const call_options& options) {
  return impl_->prepare(impl_->gatherv_shape(input, in_count, output, counts, displs, type, root), options);
}

MIMATRIX_DECL request collectives_core::scatterv(const void* input, counts_view counts, counts_view displs, void* output, std::size_t out_count, dtype type, int root, const call_options& options) {
  return impl_->start(impl_->scatterv_shape(input, counts, displs, output, out_count, type, root), options);
}

MIMATRIX_DECL persistent collectives_core::scatterv_init(const void* input, counts_view counts, counts_view displs, void* output, std::size_t out_count, dtype type, int root, const call_options& options) {
  return impl_->prepare(impl_->scatterv_shape(input, counts, displs, output, out_count, type, root), options);
}

MIMATRIX_DECL request collectives_core::alltoallv(const void* input, counts_view send_counts, counts_view send_displs, void* output, counts_view recv_counts, counts_view recv_displs, dtype type, const call_options& options) {
  return impl_->start(impl_->alltoallv_shape(input, send_counts, send_displs, output, recv_counts, recv_displs, type), options);
}

MIMATRIX_DECL persistent collectives_core::alltoallv_init(const void* input, counts_view send_counts, counts_view send_displs, void* output, counts_view recv_counts, counts_view recv_displs, dtype type, const call_options& options) {
  return impl_->prepare(impl_->alltoallv_shape(input, send_counts, send_displs, output, recv_counts, recv_displs, type), options);
}

MIMATRIX_DECL void collectives_core::barrier(const call_options& options) {
  std::uint8_t in = 0, out = 0;
  try {
    impl_->engine(schedule::collective::allreduce, options)
        .start(schedule::collective::allreduce, &in, 1, &out, 1, 0, impl_->kernels(schedule::collective::allreduce, dtype::uint8, reduce::op_kind::max),
               options.timeout, nullptr, options.tag, /*barrier=*/true)
        .wait();
  } catch (const error& e) {  // the caller called barrier(), not the allreduce it is made of
    throw error(e.code(), "barrier (an allreduce of one byte): " + e.reason());
  }
}

MIMATRIX_DECL void collectives_core::refuse(schedule::collective kind, const std::string& why) {
  impl_->refuse(kind, why);
}

}  // namespace mimatrix::detail
