// collectives_core's definitions: in every unit when header-only, once with separate
// compilation.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>

#include "mimatrix/core/error.hpp"
#include "mimatrix/detail/collectives_core.hpp"
#include "mimatrix/detail/communicator_state.hpp"
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

  /// Starts `kind` with the engine of the call's algorithm; counts in elements of `type`.
  request start(schedule::collective kind, const void* in, std::size_t in_count, void* out, std::size_t out_count,
                int root, dtype type, reduce::op_kind op, const call_options& options) {
    return engine(kind, options)
        .start(kind, in, in_count, out, out_count, root, kernels(kind, type, op), options.timeout,
               options.stream ? &*options.stream : nullptr, options.tag);
  }
  std::size_t size() const { return std::size_t(transport.size); }
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

MIMATRIX_DECL request collectives_core::allreduce(const void* input, void* output, std::size_t count, dtype type,
                                                  reduce::op_kind op, const call_options& options) {
  return impl_->start(schedule::collective::allreduce, input, count, output, count, 0, type, op, options);
}

MIMATRIX_DECL request collectives_core::reduce_scatter(const void* input, void* output, std::size_t count, dtype type,
                                                       reduce::op_kind op, const call_options& options) {
  return impl_->start(schedule::collective::reduce_scatter, input, count * impl_->size(), output, count, 0, type, op,
                      options);
}

MIMATRIX_DECL request collectives_core::allgather(const void* input, void* output, std::size_t count, dtype type,
                                                  const call_options& options) {
  return impl_->start(schedule::collective::allgather, input, count, output, count * impl_->size(), 0, type,
                      reduce::op_kind::sum, options);
}

MIMATRIX_DECL request collectives_core::broadcast(const void* input, void* output, std::size_t count, dtype type,
                                                  int root, const call_options& options) {
  return impl_->start(schedule::collective::broadcast, input, impl_->is(root) ? count : 0, output, count, root, type,
                      reduce::op_kind::sum, options);
}

MIMATRIX_DECL request collectives_core::reduce(const void* input, void* output, std::size_t count, dtype type,
                                               reduce::op_kind op, int root, const call_options& options) {
  return impl_->start(schedule::collective::reduce, input, count, impl_->is(root) ? output : nullptr,
                      impl_->is(root) ? count : 0, root, type, op, options);
}

MIMATRIX_DECL request collectives_core::gather(const void* input, void* output, std::size_t count, dtype type,
                                               int root, const call_options& options) {
  return impl_->start(schedule::collective::gather, input, count, impl_->is(root) ? output : nullptr,
                      impl_->is(root) ? count * impl_->size() : 0, root, type, reduce::op_kind::sum, options);
}

MIMATRIX_DECL request collectives_core::scatter(const void* input, void* output, std::size_t count, dtype type,
                                                int root, const call_options& options) {
  return impl_->start(schedule::collective::scatter, impl_->is(root) ? input : nullptr,
                      impl_->is(root) ? count * impl_->size() : 0, output, count, root, type, reduce::op_kind::sum,
                      options);
}

MIMATRIX_DECL request collectives_core::alltoall(const void* input, void* output, std::size_t count, dtype type,
                                                 const call_options& options) {
  return impl_->start(schedule::collective::alltoall, input, count * impl_->size(), output, count * impl_->size(), 0,
                      type, reduce::op_kind::sum, options);
}

MIMATRIX_DECL persistent collectives_core::allreduce_init(const void* input, void* output, std::size_t count,
                                                          dtype type, reduce::op_kind op,
                                                          const call_options& options) {
  constexpr auto kind = schedule::collective::allreduce;
  const reduce::host_kernels& kernels = reduce::host_kernels_for(type, op);  // throws naming the bad one
  engine_core& engine = impl_->engine(kind, options);
  return persistent(engine, engine.prepare(kind, input, count, output, count, 0, kernels, options.timeout,
                                           options.stream ? &*options.stream : nullptr, options.tag));
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
