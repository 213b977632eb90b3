// What every typed collective shares: its parts checked with concepts and bound to the
// plain engine (engine_core.hpp), and its kernels.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/communicator.hpp"
#include "mimatrix/core/config.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/options.hpp"
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/detail/bindings.hpp"
#include "mimatrix/detail/engine_core.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/persistent.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/topology/layout.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix::detail {

/// The kernels of `Op`. With separate compilation mimatrix's own operations come from the
/// library's table, so a user's unit compiles no kernel for them.
template <reduce::operation Op>
const reduce::host_kernels& kernels_of() {
  using T = typename Op::value_type;
  constexpr bool own = std::is_same_v<Op, reduce::sum<T>> || std::is_same_v<Op, reduce::prod<T>> ||
                       std::is_same_v<Op, reduce::min<T>> || std::is_same_v<Op, reduce::max<T>> ||
                       std::is_same_v<Op, reduce::avg<T>>;
  if constexpr (own && !MIMATRIX_HEADER_ONLY) return reduce::host_kernels_for(dtype_of<T>, Op::kind);
  else return reduce::host_kernels_of<Op>;
}

/// What a typed collective's constructor takes for `Algorithm`: a stand-in where the
/// topology has no default (void), so that collective_engine's static_assert is the first
/// error a user reads, not "invalid parameter type 'void'".
struct no_default_algorithm {};
template <class Algorithm>
using algorithm_argument = std::conditional_t<std::is_void_v<Algorithm>, no_default_algorithm, Algorithm>;

/// The engine of a typed collective: `Algorithm` on `Topology` over `Transport`.
template <transport::backend Transport, topology::layout Topology, class Algorithm>
class collective_engine {
  static_assert(!std::is_void_v<Algorithm>,
                "mimatrix: no default algorithm is known for this topology: include the header that declares "
                "it (mimatrix/algorithm/ring.hpp for topology::ring, hdrm.hpp for bigraph, gdraa.hpp for mesh, "
                "hierarchical.hpp for hierarchical; <mimatrix/mimatrix.hpp> has them all), or name one as the "
                "last template argument (a hierarchical topology with a part whose default is one-sided, as a "
                "mesh's gdraa, has none)");
  static_assert(algorithm::builds_for<Algorithm, Topology>,
                "mimatrix: this algorithm cannot build schedules for this topology; pick one that supports it");

 public:
  collective_engine(communicator<Transport>& comm, Topology topo, Algorithm algo)
      : comm_(comm),
        rank_(comm.rank()),
        size_(comm.size()),
        core_(comm.state(), face_of(comm.transport()),
              bind_algorithm(std::move(topo), std::move(algo), comm.size(), suggestion_of(comm.transport()))) {}

  communicator<Transport>& comm() { return comm_; }
  /// The communicator's, kept: they stay readable if it is gone (start() then refuses).
  int rank() const { return rank_; }
  int size() const { return size_; }

  /// Checks the arguments, then starts the call. Counts are in elements. `options` may
  /// set a deadline, a tag and a stream; the algorithm is the type's.
  template <reduce::operation Op>
  request start(schedule::collective kind, const typename Op::value_type* in, std::size_t in_count,
                typename Op::value_type* out, std::size_t out_count, int root, const Op&,
                const call_options& options = {}) {
    refuse_pinned(options);  // before the call takes a sequence number: ranks stay in step
    return core_.start(kind, in, in_count, out, out_count, root, kernels_of<Op>(), options.timeout,
                       options.stream ? &*options.stream : nullptr, options.tag);
  }
  /// The call checked and planned once, to start many times (persistent).
  template <reduce::operation Op>
  persistent prepare(schedule::collective kind, const typename Op::value_type* in, std::size_t in_count,
                     typename Op::value_type* out, std::size_t out_count, int root, const Op&,
                     const call_options& options = {}) {
    refuse_pinned(options);
    return persistent(core_, core_.prepare(kind, in, in_count, out, out_count, root, kernels_of<Op>(), options.timeout,
                                           options.stream ? &*options.stream : nullptr, options.tag));
  }

 private:
  void refuse_pinned(const call_options& options) const {
    if (!options.pinned_algorithm().empty())
      throw error(errc::invalid_argument, "rank " + std::to_string(rank_) +
                                              ": a typed collective runs the algorithm of its type; "
                                              "call_options::algorithm ('" + options.algorithm +
                                              "') is for collectives<>");
  }

  communicator<Transport>& comm_;
  int rank_, size_;
  engine_core core_;
};

}  // namespace mimatrix::detail
