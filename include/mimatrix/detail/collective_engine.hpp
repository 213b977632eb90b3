// What every collective type shares: argument checks with messages that say what
// was wrong and on which rank, its plans in the communicator's cache, and the hand-off to
// the transport.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/algorithm/policy.hpp"
#include "mimatrix/communicator.hpp"
#include "mimatrix/core/config.hpp"
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/detail/plan_cache.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/schedule/lower.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"
#include "mimatrix/topology/layout.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix::detail {

template <transport::backend Transport, topology::layout Topology, class Algorithm>
class collective_engine {
  static_assert(!std::is_void_v<Algorithm>,
                "mimatrix: no default algorithm is known for this topology; name one as the last template argument");
  static_assert(algorithm::builds_for<Algorithm, Topology>,
                "mimatrix: this algorithm cannot build schedules for this topology; pick one that supports it");

 public:
  collective_engine(communicator<Transport>& comm, Topology topo, Algorithm algo)
      : comm_(comm), topo_(std::move(topo)), algo_(std::move(algo)) {
    topo_.check(comm_.size());
    if constexpr (transport::suggests_policy<Transport> && algorithm::tunable<Algorithm>)
      algo_.complete_policy(comm_.transport().suggested_policy());
  }

  communicator<Transport>& comm() { return comm_; }

  /// Checks the arguments, then starts the call. Counts are in elements.
  template <reduce::operation Op>
  request start(schedule::collective kind, const typename Op::value_type* in, std::size_t in_count,
                typename Op::value_type* out, std::size_t out_count, int root, const Op&) {
    return start(kind, in, in_count, out, out_count, root, reduce::host_kernels_of<Op>);
  }

  /// The same with the element type and operation as values (runtime-typed calls), and
  /// a deadline of its own if `timeout` is set.
  request start(schedule::collective kind, const void* in, std::size_t in_count, void* out, std::size_t out_count,
                int root, const reduce::host_kernels& kernels,
                std::optional<std::chrono::milliseconds> timeout = std::nullopt);

 private:
  std::optional<std::string> check(const schedule::descriptor& d, const void* in, std::size_t in_count, void* out,
                                   std::size_t out_count) const;
  /// Of this call's plans, the one the transport runs.
  std::shared_ptr<const schedule::schedule> pick(const plan_set& p, const schedule::descriptor& d) const;
  /// The communicator's cache holds the plans; the last call's stay here too, since
  /// training repeats one size.
  const plan_set& plan_for(const schedule::descriptor& d);
  /// Lowering needs every rank's schedule (a wait's receives come from its writers).
  plan_set build(const schedule::descriptor& d) const;

  communicator<Transport>& comm_;
  Topology topo_;
  Algorithm algo_;
  std::uint64_t owner_ = comm_.plans().new_owner();
  plan_key last_key_{};
  plan_set last_;
  bool has_last_ = false;
};

// Out of the class, so that under separate compilation the extern declarations below keep
// a user's unit from instantiating them (an optimizing compiler instantiates inline ones).

template <transport::backend Transport, topology::layout Topology, class Algorithm>
request collective_engine<Transport, Topology, Algorithm>::start(schedule::collective kind, const void* in,
                                                                 std::size_t in_count, void* out,
                                                                 std::size_t out_count, int root,
                                                                 const reduce::host_kernels& kernels,
                                                                 std::optional<std::chrono::milliseconds> timeout) {
  const std::size_t count = kind == schedule::collective::allgather ? in_count : out_count;
  const signature sig{kind, kernels.op, kernels.type, count, kind == schedule::collective::broadcast ? root : 0,
                      comm_.next_sequence()};
  const schedule::descriptor desc{kind, comm_.size(), count, kernels.elem_size, sig.root};
  if (auto why = check(desc, in, in_count, out, out_count)) {
    const std::string message =
        describe({comm_.rank(), -1, schedule::to_string(kind), static_cast<std::int64_t>(sig.sequence)}, *why);
    comm_.transport().fail(sig, errc::invalid_argument, message);
    throw error(errc::invalid_argument, message);
  }
  return request(comm_.transport().start(pick(plan_for(desc), desc), static_cast<const std::byte*>(in),
                                         static_cast<std::byte*>(out), sig, kernels,
                                         timeout.value_or(comm_.settings().timeout)));
}

template <transport::backend Transport, topology::layout Topology, class Algorithm>
std::optional<std::string> collective_engine<Transport, Topology, Algorithm>::check(const schedule::descriptor& d,
                                                                                    const void* in,
                                                                                    std::size_t in_count, void* out,
                                                                                    std::size_t out_count) const {
  const int p = comm_.size(), r = comm_.rank();
  const bool reads_input = d.kind != schedule::collective::broadcast || r == d.root;
  const std::size_t want_in = d.input_bytes() / d.elem_size, want_out = d.output_bytes() / d.elem_size;
  if (d.kind == schedule::collective::broadcast && (d.root < 0 || d.root >= p))
    return "root " + std::to_string(d.root) + " is outside a group of " + std::to_string(p);
  if (reads_input && in_count != want_in)
    return "the input holds " + std::to_string(in_count) + " elements but " + std::to_string(want_in) +
           " are needed (output " + std::to_string(out_count) + " elements, group of " + std::to_string(p) + ")";
  if (out_count != want_out)
    return "the output holds " + std::to_string(out_count) + " elements but " + std::to_string(want_out) +
           " are needed (input " + std::to_string(in_count) + " elements, group of " + std::to_string(p) + ")";
  if (reads_input && in_count && !in) return std::string("the input is a null pointer");
  if (out_count && !out) return std::string("the output is a null pointer");
  if (!reads_input || !in_count || !out_count) return std::nullopt;
  const auto* in_begin = static_cast<const std::byte*>(in);
  const auto* out_begin = static_cast<const std::byte*>(out);
  if (in_begin - d.in_place_input_offset(r) == out_begin - d.in_place_output_offset(r)) return std::nullopt;
  if (in_begin < out_begin + d.output_bytes() && out_begin < in_begin + d.input_bytes()) {
    std::ostringstream s;
    s << "the input [" << static_cast<const void*>(in_begin) << ", +" << d.input_bytes()
      << " bytes) overlaps the output [" << static_cast<const void*>(out_begin) << ", +" << d.output_bytes()
      << " bytes) without being in place (in place, the input starts " << d.in_place_input_offset(r)
      << " bytes into the output, or the output " << d.in_place_output_offset(r) << " bytes into the input)";
    return s.str();
  }
  return std::nullopt;
}

template <transport::backend Transport, topology::layout Topology, class Algorithm>
std::shared_ptr<const schedule::schedule> collective_engine<Transport, Topology, Algorithm>::pick(
    const plan_set& p, const schedule::descriptor& d) const {
  if (!p.lowered) return p.as_built;
  if constexpr (transport::runs_one_sided_sometimes<Transport>) {
    if (comm_.transport().runs_one_sided(d, p.most_scratch)) return p.as_built;
  }
  return p.lowered;
}

template <transport::backend Transport, topology::layout Topology, class Algorithm>
const plan_set& collective_engine<Transport, Topology, Algorithm>::plan_for(const schedule::descriptor& d) {
  const plan_key key{owner_, d.kind, d.count, d.elem_size, d.root};
  if (has_last_ && key == last_key_) return last_;
  last_ = comm_.plans().find_or_build(key, [&] { return build(d); });
  last_key_ = key;
  has_last_ = true;
  return last_;
}

template <transport::backend Transport, topology::layout Topology, class Algorithm>
plan_set collective_engine<Transport, Topology, Algorithm>::build(const schedule::descriptor& d) const {
  schedule::schedule mine = algo_.build(topo_, d, comm_.rank());
  plan_set p;
  if constexpr (!transport::runs_one_sided<Transport>) {
    const bool one_sided = std::any_of(mine.steps.begin(), mine.steps.end(), [](const schedule::step& st) {
      return schedule::is_one_sided(st.kind) || st.kind == schedule::step_kind::wait;
    });
    if (one_sided) {
      std::vector<schedule::schedule> group;
      group.reserve(std::size_t(comm_.size()));
      for (int r = 0; r < comm_.size(); ++r) {
        group.push_back(r == comm_.rank() ? mine : algo_.build(topo_, d, r));
        p.most_scratch = std::max(p.most_scratch, group.back().scratch_bytes);
      }
      p.lowered = std::make_shared<const schedule::schedule>(
          std::move(schedule::lower_one_sided(group)[std::size_t(comm_.rank())]));
    }
  }
  p.as_built = std::make_shared<const schedule::schedule>(std::move(mine));
  return p;
}

}  // namespace mimatrix::detail

#if !MIMATRIX_HEADER_ONLY
#include "mimatrix/detail/impl/compiled_engines.hpp"
#endif
