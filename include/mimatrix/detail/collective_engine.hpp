// What every collective type shares: argument checks with messages that say what
// was wrong and on which rank, the schedule cache, and the hand-off to the transport.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
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
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/signature.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/schedule/lower.hpp"
#include "mimatrix/schedule/schedule.hpp"
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
                typename Op::value_type* out, std::size_t out_count, int root, const Op& op) {
    using T = typename Op::value_type;
    const std::size_t count = kind == schedule::collective::allgather ? in_count : out_count;
    const signature sig{kind, Op::kind, dtype_of<T>, count, kind == schedule::collective::broadcast ? root : 0,
                        comm_.next_sequence()};
    const schedule::descriptor desc{kind, comm_.size(), count, sizeof(T), sig.root};
    if (auto why = check(desc, in, in_count, out, out_count)) {
      const std::string message = describe({comm_.rank(), -1, schedule::to_string(kind),
                                            static_cast<std::int64_t>(sig.sequence)}, *why);
      comm_.transport().fail(sig, errc::invalid_argument, message);
      throw error(errc::invalid_argument, message);
    }
    return request(comm_.transport().start(plan_for(desc).pick(comm_.transport(), desc), reinterpret_cast<const std::byte*>(in),
                                           reinterpret_cast<std::byte*>(out), sig, op, comm_.settings().timeout));
  }

 private:
  template <class T>
  std::optional<std::string> check(const schedule::descriptor& d, const T* in, std::size_t in_count, T* out,
                                   std::size_t out_count) const {
    const int p = comm_.size(), r = comm_.rank();
    const bool reads_input = d.kind != schedule::collective::broadcast || r == d.root;
    const std::size_t want_in = d.input_bytes() / sizeof(T), want_out = d.output_bytes() / sizeof(T);
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
    const auto* in_begin = reinterpret_cast<const std::byte*>(in);
    const auto* out_begin = reinterpret_cast<const std::byte*>(out);
    if (in_begin - d.in_place_input_offset(r) == out_begin - d.in_place_output_offset(r)) return std::nullopt;
    if (in_begin < out_begin + d.output_bytes() && out_begin < in_begin + d.input_bytes()) {
      std::ostringstream s;
      s << "the input [" << static_cast<const void*>(in_begin) << ", +" << d.input_bytes() << " bytes) overlaps the output ["
        << static_cast<const void*>(out_begin) << ", +" << d.output_bytes()
        << " bytes) without being in place (in place, the input starts "
        << d.in_place_input_offset(r) << " bytes into the output, or the output "
        << d.in_place_output_offset(r) << " bytes into the input)";
      return s.str();
    }
    return std::nullopt;
  }

  /// This rank's schedule for one call, in up to two forms: as built, and with its
  /// one-sided steps lowered to messages for transports that cannot run them (always, or
  /// for this call).
  struct plans {
    using pointer = std::shared_ptr<const schedule::schedule>;
    pointer as_built, lowered;         // lowered: null when the schedule has no one-sided step
    std::size_t most_scratch = 0;      // over every rank's schedule (one-sided ones only)

    pointer pick(const Transport& t, const schedule::descriptor& d) const {
      if (!lowered) return as_built;
      if constexpr (transport::runs_one_sided_sometimes<Transport>) {
        if (t.runs_one_sided(d, most_scratch)) return as_built;
      }
      return lowered;
    }
  };

  using plan_key = std::tuple<schedule::collective, std::size_t, std::size_t, int>;

  const plans& plan_for(const schedule::descriptor& d) {
    const auto key = std::make_tuple(d.kind, d.count, d.elem_size, d.root);
    if (last_ && key == last_key_) return *last_;  // training repeats one size
    if (auto it = plans_.find(key); it != plans_.end()) return remember(key, it->second);
    if (plans_.size() >= max_cached_plans) {
      plans_.clear();
      last_ = nullptr;
    }
    return remember(key, plans_.emplace(key, build(d)).first->second);
  }

  const plans& remember(const plan_key& key, const plans& p) {
    last_key_ = key;
    last_ = &p;
    return p;
  }

  /// Lowering needs every rank's schedule (a wait's receives come from its writers).
  plans build(const schedule::descriptor& d) const {
    schedule::schedule mine = algo_.build(topo_, d, comm_.rank());
    plans p;
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

  static constexpr std::size_t max_cached_plans = 64;

  communicator<Transport>& comm_;
  Topology topo_;
  Algorithm algo_;
  std::map<plan_key, plans> plans_;
  plan_key last_key_{};
  const plans* last_ = nullptr;  // the entry of the last call (map nodes do not move)
};

}  // namespace mimatrix::detail
