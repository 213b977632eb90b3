// reduce_scatter: rank r ends with block r of the reduction of all ranks' buffers.
#pragma once

#include <span>
#include <utility>

#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/communicator.hpp"
#include "mimatrix/detail/collective_engine.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/topology/layout.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix {

/// Input: size()·n elements on every rank; output: the n elements of block rank().
///
/// @par Thread Safety
/// Like its communicator: one thread at a time, the same call order on every rank.
template <transport::backend Transport, topology::layout Topology, reduce::operation Reduction,
          class Algorithm = algorithm::default_for<Topology>>
class reduce_scatter {
 public:
  using value_type = typename Reduction::value_type;

  explicit reduce_scatter(communicator<Transport>& comm, Topology topology = {},
                          detail::algorithm_argument<Algorithm> algorithm = {}, Reduction op = {})
      : engine_(comm, std::move(topology), std::move(algorithm)), op_(op) {}

  /// `options`: a deadline, a tag, a stream (see allreduce).
  [[nodiscard]] request start(std::span<const value_type> input, std::span<value_type> output,
                              const call_options& options = {}) {
    return engine_.start(schedule::collective::reduce_scatter, input.data(), input.size(), output.data(),
                         output.size(), 0, op_, options);
  }
  /// In place: the result lands in block rank() of `data`.
  [[nodiscard]] request start(std::span<value_type> data, const call_options& options = {}) {
    const std::size_t n = data.size() / engine_.size();
    return start(data, data.subspan(n * engine_.rank(), n), options);
  }

  void operator()(std::span<const value_type> input, std::span<value_type> output) { start(input, output).wait(); }
  void operator()(std::span<value_type> data) { start(data).wait(); }

 private:
  detail::collective_engine<Transport, Topology, Algorithm> engine_;
  Reduction op_;
};

}  // namespace mimatrix
