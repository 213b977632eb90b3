// allreduce: every rank ends with the reduction of all ranks' buffers.
#pragma once

#include <span>
#include <system_error>
#include <utility>

#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/communicator.hpp"
#include "mimatrix/detail/collective_engine.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/persistent.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/topology/layout.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix {

/// The allreduce that `Algorithm` runs on `Topology` over `Transport`, reducing with
/// `Reduction`; schedules are generated once per count and cached.
///
/// @code
///   mimatrix::allreduce<transport::inproc, topology::ring, reduce::sum<float>> sum(comm);
///   sum(gradients);                       // in place, blocking
///   auto pending = sum.start(in, out);    // out of place, non-blocking
///   pending.wait();
/// @endcode
///
/// @par Thread Safety
/// Like its communicator: one thread at a time, the same call order on every rank.
template <transport::backend Transport, topology::layout Topology, reduce::operation Reduction,
          class Algorithm = algorithm::default_for<Topology>>
class allreduce {
 public:
  using value_type = typename Reduction::value_type;

  explicit allreduce(communicator<Transport>& comm, Topology topology = {},
                     detail::algorithm_argument<Algorithm> algorithm = {}, Reduction op = {})
      : engine_(comm, std::move(topology), std::move(algorithm)), op_(op) {}

  /// Out of place: `output` = reduction of every rank's `input`. Equal sizes. `options`
  /// may set a deadline, a tag and a stream (device buffers); the algorithm is the type's.
  [[nodiscard]] request start(std::span<const value_type> input, std::span<value_type> output,
                              const call_options& options = {}) {
    return engine_.start(schedule::collective::allreduce, input.data(), input.size(), output.data(), output.size(),
                         0, op_, options);
  }
  /// In place.
  [[nodiscard]] request start(std::span<value_type> data, const call_options& options = {}) {
    return start(data, data, options);
  }
  /// Checked and planned once, to start many times on these buffers (MPI_Allreduce_init).
  [[nodiscard]] persistent prepare(std::span<const value_type> input, std::span<value_type> output,
                                   const call_options& options = {}) {
    return engine_.prepare(schedule::collective::allreduce, input.data(), input.size(), output.data(), output.size(),
                           0, op_, options);
  }

  void operator()(std::span<const value_type> input, std::span<value_type> output) { start(input, output).wait(); }
  void operator()(std::span<value_type> data) { start(data).wait(); }

 private:
  detail::collective_engine<Transport, Topology, Algorithm> engine_;
  Reduction op_;
};

}  // namespace mimatrix
