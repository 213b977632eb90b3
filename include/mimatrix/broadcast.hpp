// broadcast: every rank ends with the root's buffer.
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

/// The root's `input` is copied to every rank's `output`; other ranks' inputs are
/// not read (they may be empty).
///
/// @par Thread Safety
/// Like its communicator: one thread at a time, the same call order on every rank.
template <transport::backend Transport, topology::layout Topology, element T,
          class Algorithm = algorithm::default_for<Topology>>
class broadcast {
 public:
  using value_type = T;

  explicit broadcast(communicator<Transport>& comm, Topology topology = {},
                     detail::algorithm_argument<Algorithm> algorithm = {})
      : engine_(comm, std::move(topology), std::move(algorithm)) {}

  /// `options`: a deadline, a tag, a stream (see allreduce).
  [[nodiscard]] request start(std::span<const T> input, std::span<T> output, int root, const call_options& options = {}) {
    return engine_.start(schedule::collective::broadcast, input.data(), input.size(), output.data(), output.size(),
                         root, reduce::sum<T>{}, options);
  }
  /// In place: `data` is the root's input and every rank's output.
  [[nodiscard]] request start(std::span<T> data, int root, const call_options& options = {}) {
    return start(data, data, root, options);
  }

  void operator()(std::span<const T> input, std::span<T> output, int root) { start(input, output, root).wait(); }
  void operator()(std::span<T> data, int root) { start(data, root).wait(); }

 private:
  detail::collective_engine<Transport, Topology, Algorithm> engine_;
};

}  // namespace mimatrix
