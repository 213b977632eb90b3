// allgather: every rank ends with every rank's block, in rank order.
#pragma once

#include <span>
#include <utility>

#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/communicator.hpp"
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/detail/collective_engine.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/topology/layout.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix {

/// Input: n elements on every rank; output: size()·n elements, block j from rank j.
///
/// @par Thread Safety
/// Like its communicator: one thread at a time, the same call order on every rank.
template <transport::backend Transport, topology::layout Topology, element T,
          class Algorithm = algorithm::default_for<Topology>>
class allgather {
 public:
  using value_type = T;

  explicit allgather(communicator<Transport>& comm, Topology topology = {},
                     detail::algorithm_argument<Algorithm> algorithm = {})
      : engine_(comm, std::move(topology), std::move(algorithm)) {}

  /// `options`: a deadline, a tag, a stream (see allreduce).
  [[nodiscard]] request start(std::span<const T> input, std::span<T> output, const call_options& options = {}) {
    // Nothing is reduced; the operation only names the element type.
    return engine_.start(schedule::collective::allgather, input.data(), input.size(), output.data(), output.size(),
                         0, reduce::sum<T>{}, options);
  }
  /// In place: this rank's input is already block rank() of `data`.
  [[nodiscard]] request start(std::span<T> data, const call_options& options = {}) {
    const std::size_t n = data.size() / engine_.size();
    return start(data.subspan(n * engine_.rank(), n), data, options);
  }

  void operator()(std::span<const T> input, std::span<T> output) { start(input, output).wait(); }
  void operator()(std::span<T> data) { start(data).wait(); }

 private:
  detail::collective_engine<Transport, Topology, Algorithm> engine_;
};

}  // namespace mimatrix
