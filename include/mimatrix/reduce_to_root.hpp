// reduce_to_root: the root ends with the reduction of every rank's buffer (ncclReduce,
// MPI_Reduce). Named so because `mimatrix::reduce` is the namespace of the operations.
#pragma once

#include <span>
#include <utility>

#include "mimatrix/algorithm/binomial.hpp"
#include "mimatrix/communicator.hpp"
#include "mimatrix/detail/collective_engine.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/topology/layout.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix {

/// Every rank's `input` is reduced with `Op` into the root's `output`; other ranks'
/// outputs are not written (they may be empty).
///
/// @par Thread Safety
/// Like its communicator: one thread at a time, the same call order on every rank.
template <transport::backend Transport, topology::layout Topology, reduce::operation Op,
          class Algorithm = algorithm::binomial>
class reduce_to_root {
  static_assert(algorithm::runs_collective<Algorithm>(schedule::collective::reduce),
                "mimatrix: this algorithm does not run reduce; binomial, linear and rabenseifner do");

 public:
  using value_type = typename Op::value_type;

  explicit reduce_to_root(communicator<Transport>& comm, Topology topology = {}, Algorithm algorithm = {})
      : engine_(comm, std::move(topology), std::move(algorithm)) {}

  /// `options`: a deadline, a tag, a stream (see allreduce). In place on the root: `input`
  /// and `output` may be one buffer.
  [[nodiscard]] request start(std::span<const value_type> input, std::span<value_type> output, int root,
                              const call_options& options = {}) {
    const bool mine = engine_.rank() == root;
    return engine_.start(schedule::collective::reduce, input.data(), input.size(), mine ? output.data() : nullptr,
                         mine ? output.size() : 0, root, Op{}, options);
  }

  void operator()(std::span<const value_type> input, std::span<value_type> output, int root) {
    start(input, output, root).wait();
  }

 private:
  detail::collective_engine<Transport, Topology, Algorithm> engine_;
};

}  // namespace mimatrix
