// gather and scatter: blocks between every rank and a root (MPI_Gather, MPI_Scatter).
#pragma once

#include <span>
#include <utility>

#include "mimatrix/algorithm/binomial.hpp"
#include "mimatrix/communicator.hpp"
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/detail/collective_engine.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/topology/layout.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix {

/// The root's `output` holds size() blocks of input.size(), block j from rank j; other
/// ranks' outputs are not written (they may be empty).
///
/// @par Thread Safety
/// Like its communicator: one thread at a time, the same call order on every rank.
template <transport::backend Transport, topology::layout Topology, element T, class Algorithm = algorithm::binomial>
class gather {
  static_assert(algorithm::runs_collective<Algorithm>(schedule::collective::gather),
                "mimatrix: this algorithm does not run gather; binomial and linear do");

 public:
  using value_type = T;

  explicit gather(communicator<Transport>& comm, Topology topology = {}, Algorithm algorithm = {})
      : engine_(comm, std::move(topology), std::move(algorithm)) {}

  /// `options`: a deadline, a tag, a stream (see allreduce).
  [[nodiscard]] request start(std::span<const T> input, std::span<T> output, int root,
                              const call_options& options = {}) {
    const bool mine = engine_.rank() == root;
    return engine_.start(schedule::collective::gather, input.data(), input.size(), mine ? output.data() : nullptr,
                         mine ? output.size() : 0, root, reduce::sum<T>{}, options);
  }
  /// In place on the root: its input is already block root of `data` (others: `data` is
  /// their input).
  [[nodiscard]] request start(std::span<T> data, int root, const call_options& options = {}) {
    if (engine_.rank() != root) return start(std::span<const T>(data), std::span<T>(), root, options);
    const std::size_t n = data.size() / std::size_t(engine_.size());
    return start(data.subspan(n * std::size_t(root), n), data, root, options);
  }

  void operator()(std::span<const T> input, std::span<T> output, int root) { start(input, output, root).wait(); }

 private:
  detail::collective_engine<Transport, Topology, Algorithm> engine_;
};

/// The root's `input` holds size() blocks of output.size(), block j for rank j; other
/// ranks' inputs are not read (they may be empty).
///
/// @par Thread Safety
/// Like its communicator: one thread at a time, the same call order on every rank.
template <transport::backend Transport, topology::layout Topology, element T, class Algorithm = algorithm::binomial>
class scatter {
  static_assert(algorithm::runs_collective<Algorithm>(schedule::collective::scatter),
                "mimatrix: this algorithm does not run scatter; binomial and linear do");

 public:
  using value_type = T;

  explicit scatter(communicator<Transport>& comm, Topology topology = {}, Algorithm algorithm = {})
      : engine_(comm, std::move(topology), std::move(algorithm)) {}

  /// `options`: a deadline, a tag, a stream (see allreduce).
  [[nodiscard]] request start(std::span<const T> input, std::span<T> output, int root,
                              const call_options& options = {}) {
    const bool mine = engine_.rank() == root;
    return engine_.start(schedule::collective::scatter, mine ? input.data() : nullptr, mine ? input.size() : 0,
                         output.data(), output.size(), root, reduce::sum<T>{}, options);
  }
  /// In place on the root: its output is block root of `data`, which it keeps (others:
  /// `data` is their output).
  [[nodiscard]] request start(std::span<T> data, int root, const call_options& options = {}) {
    if (engine_.rank() != root) return start(std::span<const T>(), data, root, options);
    const std::size_t n = data.size() / std::size_t(engine_.size());
    return start(data, data.subspan(n * std::size_t(root), n), root, options);
  }

  void operator()(std::span<const T> input, std::span<T> output, int root) { start(input, output, root).wait(); }

 private:
  detail::collective_engine<Transport, Topology, Algorithm> engine_;
};

}  // namespace mimatrix
