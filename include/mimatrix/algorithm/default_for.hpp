// Which algorithm a collective uses on a topology when the user names none, and the
// concept an algorithm must model to run on a topology.
#pragma once

#include <concepts>
#include <string>
#include <string_view>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::algorithm {

/// Specialized beside each algorithm for the topologies it is the natural choice for.
template <class Topology>
struct default_algorithm {
  using type = void;
};

template <class Topology>
using default_for = typename default_algorithm<Topology>::type;

/// Whether `Algorithm` builds schedules for collective `kind`: what its static
/// `runs(kind)` says, or, for an algorithm that does not say, the four collectives the
/// first algorithms were written for (allreduce, reduce-scatter, allgather, broadcast).
template <class Algorithm>
constexpr bool runs_collective(schedule::collective kind) {
  if constexpr (requires { { Algorithm::runs(kind) } -> std::convertible_to<bool>; }) return Algorithm::runs(kind);
  else
    return kind == schedule::collective::allreduce || kind == schedule::collective::reduce_scatter ||
           kind == schedule::collective::allgather || kind == schedule::collective::broadcast;
}

/// For a direct build() of a collective that `algorithm` does not run (automatic and the
/// typed collectives ask runs_collective first): an invalid_argument naming both and the
/// rank that asked.
[[noreturn]] inline void refuse_collective(std::string_view algorithm, schedule::collective kind, int rank) {
  throw error(errc::invalid_argument, "rank " + std::to_string(rank) + ": algorithm " + std::string(algorithm) +
                                          " builds no " + std::string(schedule::to_string(kind)) + " schedule");
}

/// `Algorithm` generates schedules on `Topology`.
template <class Algorithm, class Topology>
concept builds_for = requires(const Algorithm& a, const Topology& t, const schedule::descriptor& d, int rank) {
  { Algorithm::name } -> std::convertible_to<std::string_view>;
  { a.build(t, d, rank) } -> std::same_as<schedule::schedule>;
};

}  // namespace mimatrix::algorithm
