// collectives: the runtime-typed entry a framework calls as it calls NCCL. The element
// type, the operation and the algorithm are values; the topology is the one type chosen.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "mimatrix/algorithm/automatic.hpp"
#include "mimatrix/communicator.hpp"
#include "mimatrix/core/config.hpp"
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/detail/collective_engine.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/topology/layout.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix {

/// What one runtime-typed call may set besides its buffers.
struct call_options {
  /// An algorithm by name ("ring", "gdraa", "hdrm", "halving_doubling",
  /// "recursive_doubling", "hierarchical"), or empty for algorithm::automatic (the cost
  /// model, or a MIMATRIX_ALGO rule). Every rank must name the same one.
  std::string algorithm;
  /// A deadline for this call instead of the communicator's.
  std::optional<std::chrono::milliseconds> timeout;
};

/// The collectives of one communicator with runtime types, as NCCL's calls have them.
///
/// @code
///   mimatrix::collectives<mimatrix::transport::fabric> coll(comm);
///   auto pending = coll.allreduce(grad, grad, n, mimatrix::dtype::float32, mimatrix::reduce::op_kind::sum);
///   pending.wait();
/// @endcode
///
/// Counts follow NCCL: reduce_scatter's is the elements each rank receives, allgather's
/// the elements each rank sends. An unknown dtype, op or algorithm, or an algorithm that
/// does not run on `Topology`, is an `invalid_argument` naming the rank.
///
/// @par Thread Safety
/// Like its communicator: one thread at a time, the same call order on every rank.
template <transport::backend Transport, topology::layout Topology = topology::ring>
class collectives {
 public:
  explicit collectives(communicator<Transport>& comm, Topology topology = {});
  ~collectives();

  [[nodiscard]] request allreduce(const void* input, void* output, std::size_t count, dtype type, reduce::op_kind op,
                                  const call_options& options = {});
  [[nodiscard]] request reduce_scatter(const void* input, void* output, std::size_t count, dtype type,
                                       reduce::op_kind op, const call_options& options = {});
  [[nodiscard]] request allgather(const void* input, void* output, std::size_t count, dtype type,
                                  const call_options& options = {});
  /// `input` is read on `root` only (others may pass null).
  [[nodiscard]] request broadcast(const void* input, void* output, std::size_t count, dtype type, int root,
                                  const call_options& options = {});
  /// Returns once every rank has entered it (an allreduce of one byte).
  void barrier(const call_options& options = {});

  communicator<Transport>& comm() { return comm_; }

 private:
  using engine_type = detail::collective_engine<Transport, Topology, algorithm::automatic>;

  const reduce::host_kernels& kernels(dtype type, reduce::op_kind op) const;
  /// One engine (and plan-cache owner) per algorithm name, made on first use.
  engine_type& engine(const call_options& options);

  communicator<Transport>& comm_;
  Topology topology_;
  std::map<std::string, std::unique_ptr<engine_type>, std::less<>> engines_;
};

// Members out of the class: under separate compilation a user's unit instantiates none
// of them (detail/impl/compiled_collectives.hpp).

#define MIMATRIX_COLLECTIVES_MEMBER(...)                                                \
  template <transport::backend Transport, topology::layout Topology>                    \
  __VA_ARGS__ collectives<Transport, Topology>::

MIMATRIX_COLLECTIVES_MEMBER() collectives(communicator<Transport>& comm, Topology topology)
    : comm_(comm), topology_(std::move(topology)) {}

MIMATRIX_COLLECTIVES_MEMBER() ~collectives() = default;

MIMATRIX_COLLECTIVES_MEMBER(request) allreduce(const void* input, void* output, std::size_t count, dtype type,
                                               reduce::op_kind op, const call_options& options) {
  return engine(options).start(schedule::collective::allreduce, input, count, output, count, 0, kernels(type, op),
                               options.timeout);
}

MIMATRIX_COLLECTIVES_MEMBER(request) reduce_scatter(const void* input, void* output, std::size_t count, dtype type,
                                                    reduce::op_kind op, const call_options& options) {
  return engine(options).start(schedule::collective::reduce_scatter, input, count * std::size_t(comm_.size()), output,
                               count, 0, kernels(type, op), options.timeout);
}

MIMATRIX_COLLECTIVES_MEMBER(request) allgather(const void* input, void* output, std::size_t count, dtype type,
                                               const call_options& options) {
  return engine(options).start(schedule::collective::allgather, input, count, output,
                               count * std::size_t(comm_.size()), 0, kernels(type, reduce::op_kind::sum),
                               options.timeout);
}

MIMATRIX_COLLECTIVES_MEMBER(request) broadcast(const void* input, void* output, std::size_t count, dtype type,
                                               int root, const call_options& options) {
  return engine(options).start(schedule::collective::broadcast, input, comm_.rank() == root ? count : 0, output,
                               count, root, kernels(type, reduce::op_kind::sum), options.timeout);
}

MIMATRIX_COLLECTIVES_MEMBER(void) barrier(const call_options& options) {
  std::uint8_t in = 0, out = 0;
  engine(options)
      .start(schedule::collective::allreduce, &in, 1, &out, 1, 0, kernels(dtype::uint8, reduce::op_kind::max),
             options.timeout)
      .wait();
}

MIMATRIX_COLLECTIVES_MEMBER(const reduce::host_kernels&) kernels(dtype type, reduce::op_kind op) const {
  try {
    return reduce::host_kernels_for(type, op);
  } catch (const error& e) {
    throw error(errc::invalid_argument, "rank " + std::to_string(comm_.rank()) + ": " + e.what());
  }
}

MIMATRIX_COLLECTIVES_MEMBER(auto) engine(const call_options& options) -> engine_type& {
  if (auto it = engines_.find(options.algorithm); it != engines_.end()) return *it->second;
  algorithm::automatic chooser;
  if (!options.algorithm.empty()) {
    const auto known = algorithm::automatic::candidates_for<Topology>();
    bool runs = false;
    std::string list;
    for (std::string_view name : known) {
      runs = runs || name == options.algorithm;
      list += (list.empty() ? "" : ", ") + std::string(name);
    }
    if (!runs)
      throw error(errc::invalid_argument, "rank " + std::to_string(comm_.rank()) + ": algorithm '" +
                                              options.algorithm + "' does not run on this topology; it runs " + list);
    algorithm::automatic_settings pinned;
    pinned.rules = algorithm::selection::parse("*:" + options.algorithm, "call_options::algorithm");
    chooser = algorithm::automatic(std::move(pinned));
  }
  auto made = std::make_unique<engine_type>(comm_, topology_, std::move(chooser));
  return *engines_.emplace(options.algorithm, std::move(made)).first->second;
}

#undef MIMATRIX_COLLECTIVES_MEMBER

}  // namespace mimatrix

#if !MIMATRIX_HEADER_ONLY
#include "mimatrix/detail/impl/compiled_collectives.hpp"
#endif
