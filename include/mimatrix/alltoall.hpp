// alltoall: every rank sends a block to every rank (MPI_Alltoall, c10d's
// all_to_all_single with equal splits).
#pragma once

#include <span>
#include <utility>

#include "mimatrix/algorithm/pairwise.hpp"
#include "mimatrix/communicator.hpp"
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/detail/collective_engine.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/topology/layout.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix {

/// `input` and `output` hold size() blocks each: block j of the input goes to rank j,
/// block j of the output comes from rank j. Never in place (as NCCL's).
///
/// @par Thread Safety
/// Like its communicator: one thread at a time, the same call order on every rank.
template <transport::backend Transport, topology::layout Topology, element T, class Algorithm = algorithm::pairwise>
class alltoall {
  static_assert(algorithm::runs_collective<Algorithm>(schedule::collective::alltoall),
                "mimatrix: this algorithm does not run alltoall; pairwise and bruck do");

 public:
  using value_type = T;

  explicit alltoall(communicator<Transport>& comm, Topology topology = {}, Algorithm algorithm = {})
      : engine_(comm, std::move(topology), std::move(algorithm)) {}

  /// `options`: a deadline, a tag, a stream (see allreduce).
  [[nodiscard]] request start(std::span<const T> input, std::span<T> output, const call_options& options = {}) {
    return engine_.start(schedule::collective::alltoall, input.data(), input.size(), output.data(), output.size(), 0,
                         reduce::sum<T>{}, options);
  }

  void operator()(std::span<const T> input, std::span<T> output) { start(input, output).wait(); }

 private:
  detail::collective_engine<Transport, Topology, Algorithm> engine_;
};

}  // namespace mimatrix
