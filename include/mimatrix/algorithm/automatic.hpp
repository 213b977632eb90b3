// algorithm::automatic: picks, for every call, the candidate algorithm the cost model
// predicts fastest, unless a MIMATRIX_ALGO rule pins one; the choice can be printed.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "mimatrix/algorithm/automatic_fwd.hpp"  // the same alias, declared: a difference fails to compile
#include "mimatrix/algorithm/binomial.hpp"
#include "mimatrix/algorithm/bruck.hpp"
#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/algorithm/gdraa.hpp"
#include "mimatrix/algorithm/halving_doubling.hpp"
#include "mimatrix/algorithm/hdrm.hpp"
#include "mimatrix/algorithm/hierarchical.hpp"
#include "mimatrix/algorithm/linear.hpp"
#include "mimatrix/algorithm/pairwise.hpp"
#include "mimatrix/algorithm/rabenseifner.hpp"
#include "mimatrix/algorithm/recursive_doubling.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/algorithm/selection.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/log.hpp"
#include "mimatrix/model/cost.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/topology/mesh.hpp"

namespace mimatrix::algorithm {

/// What automatic chose for one call, and why.
struct decision {
  enum class reason {
    model,     // the cheapest candidate by the cost model
    override,  // a MIMATRIX_ALGO rule named it
    fallback,  // no candidate has a cost model: the first one that runs on the topology
    memory,    // device memory every rank reaches: the least memory traffic (build_on_shared_device)
  };
  struct estimate {
    std::string_view algorithm;
    std::optional<double> seconds;  // empty: the model does not know this algorithm
  };

  schedule::descriptor desc{};
  std::string_view topology;
  double bytes = 0;  // model::message_bytes(desc)
  std::string_view chosen;
  std::size_t chosen_index = 0;  // position among the candidates of basic_automatic
  reason why = reason::model;
  std::string rule;                  // the MIMATRIX_ALGO rule, when why == override
  std::vector<estimate> candidates;  // those that run on the topology, in candidate order

  /// The chosen algorithm's predicted time, if the model knows it.
  std::optional<double> predicted() const {
    for (const auto& e : candidates)
      if (e.algorithm == chosen) return e.seconds;
    return std::nullopt;
  }
};

inline std::string_view to_string(decision::reason why) {
  switch (why) {
    case decision::reason::model: return "cheapest by the cost model";
    case decision::reason::override: return "MIMATRIX_ALGO";
    case decision::reason::fallback: return "first candidate, no cost model";
    case decision::reason::memory: return "the least memory traffic on device memory every rank reaches";
  }
  return "?";
}

/// "12.3 us", "4.56 ms", "1.2 s".
inline std::string format_seconds(double seconds) {
  char text[32];
  if (seconds < 1e-3) std::snprintf(text, sizeof text, "%.3g us", seconds * 1e6);
  else if (seconds < 1) std::snprintf(text, sizeof text, "%.3g ms", seconds * 1e3);
  else std::snprintf(text, sizeof text, "%.3g s", seconds);
  return text;
}

/// One line: "allreduce of 8 bytes on 4 ranks (topology ring): recursive_doubling, cheapest
/// by the cost model; predicted ring 30 us, recursive_doubling 10 us*, ...".
inline std::string to_string(const decision& d) {
  std::string s(schedule::to_string(d.desc.kind));
  s += " of " + std::to_string(static_cast<std::uint64_t>(d.bytes)) + " bytes on " + std::to_string(d.desc.size) +
       (d.desc.size == 1 ? " rank" : " ranks");
  if (!d.topology.empty()) s += " (topology " + std::string(d.topology) + ")";
  s += ": " + std::string(d.chosen) + ", " + std::string(to_string(d.why));
  if (d.why == decision::reason::override) s += " rule '" + d.rule + "'";
  if (d.candidates.empty()) return s;
  s += "; predicted";
  for (std::size_t i = 0; i < d.candidates.size(); ++i) {
    const auto& e = d.candidates[i];
    s += i ? ", " : " ";
    s += std::string(e.algorithm) + " " + (e.seconds ? format_seconds(*e.seconds) : std::string("(no model)"));
    if (e.algorithm == d.chosen) s += '*';
  }
  return s;
}

/// What automatic decides with: the machine's numbers and the override rules.
///
/// @par Thread Safety
/// A plain value.
struct automatic_settings {
  model::network network{};
  selection rules{};

  /// Default numbers, rules from MIMATRIX_ALGO (read now, once).
  static automatic_settings from_environment() {
    automatic_settings s;
    s.rules = selection::from_environment();
    return s;
  }
};

/// How a topology shapes the model's inputs. Specialize beside a topology whose shape
/// the model needs, e.g. hierarchical's ranks per node, or the flows that share a link
/// when plain halving-doubling runs on BiGraph.
template <class Topology>
struct cost_inputs {
  static model::network adjust(const Topology&, const model::network& net) { return net; }
};

/// An algorithm that predicts its own time (e.g. a composition whose cost depends on
/// its parts); otherwise model::predict(name) is asked.
template <class Algorithm>
concept predicts_cost = requires(const Algorithm& a, const model::network& n, const schedule::descriptor& d) {
  { a.predict(n, d) } -> std::convertible_to<std::optional<double>>;
};

/// Chooses among `Candidates` per call. Only those that `builds_for` the topology are
/// considered; the choice is a function of the descriptor, the topology and the
/// settings alone, so every rank makes the same one. Ties go to the earlier candidate.
/// With MIMATRIX_DEBUG=INFO, rank 0 prints each decision when its schedule is built
/// (once per call shape: collectives cache schedules); TRACE prints every rank's.
///
/// @code
///   mimatrix::allreduce<transport::inproc, topology::ring, reduce::sum<float>, algorithm::automatic> sum(comm);
///   // MIMATRIX_ALGO="allreduce@0-8K:recursive_doubling" pins small allreduces.
/// @endcode
///
/// @par Thread Safety
/// `build` and `decide` are const and may run on any number of threads; the setters
/// may not run concurrently with them.
template <class... Candidates>
class basic_automatic {
  static_assert(sizeof...(Candidates) > 0, "mimatrix: algorithm::basic_automatic needs at least one candidate");

 public:
  static constexpr std::string_view name = "automatic";

  /// Default network numbers and MIMATRIX_ALGO's rules; throws invalid_argument when
  /// MIMATRIX_ALGO is malformed.
  basic_automatic() : basic_automatic(automatic_settings::from_environment()) {}
  explicit basic_automatic(automatic_settings settings) : settings_(std::move(settings)) {}
  /// Candidates with their own tuning (e.g. `ring(policy{...})`).
  basic_automatic(automatic_settings settings, Candidates... candidates)
      : settings_(std::move(settings)), candidates_(std::move(candidates)...) {}

  /// The collectives some candidate runs.
  static constexpr bool runs(schedule::collective kind) { return (runs_collective<Candidates>(kind) || ...); }

  const automatic_settings& settings() const { return settings_; }
  void set_rules(selection rules) { settings_.rules = std::move(rules); }
  /// `rules` pin a call's own algorithm (call_options::algorithm): one that does not run
  /// a collective is refused for it rather than left to the model.
  void pin(selection rules) {
    set_rules(std::move(rules));
    pinned_ = true;
  }
  void set_network(const model::network& net) { settings_.network = net; }

  /// Every tunable candidate takes the suggestion; the cost model then pipelines with
  /// the chunk the transport names.
  void complete_policy(const policy& suggested) {
    std::apply([&](auto&... c) { (fill(c, suggested), ...); }, candidates_);
    if (suggested.chunk_bytes) settings_.network.pipeline_chunk_bytes = suggested.chunk_bytes;
  }

  /// Every candidate's parameters (digest_of); the choice itself is compared by name.
  std::uint64_t digest() const {
    mimatrix::digest d;
    d.mix(name);
    std::apply([&](const auto&... c) { (d.mix(digest_of(c)), ...); }, candidates_);
    return d.value();
  }

  /// The names of the candidates that run on `Topology`, in order.
  template <class Topology>
  static std::vector<std::string_view> candidates_for() {
    std::vector<std::string_view> names;
    ((builds_for<Candidates, Topology> ? names.push_back(Candidates::name) : void()), ...);
    return names;
  }

  /// What `build` would choose. Throws invalid_argument when a rule names an algorithm
  /// that cannot run on this topology.
  template <class Topology>
    requires(builds_for<Candidates, Topology> || ...)
  decision decide(const Topology& topo, const schedule::descriptor& desc) const {
    decision d;
    d.desc = desc;
    if constexpr (requires { Topology::name; }) d.topology = Topology::name;
    d.bytes = model::message_bytes(desc);
    const model::network net = cost_inputs<Topology>::adjust(topo, settings_.network);
    std::vector<std::size_t> index;  // candidate position of each estimate
    estimate_each<Topology>(net, desc, d.candidates, index, std::index_sequence_for<Candidates...>{});

    check_rules<Topology>();
    const auto bytes = static_cast<std::uint64_t>(d.bytes);
    if (const selection_rule* rule = settings_.rules.match(desc.kind, bytes)) {
      for (std::size_t i = 0; i < d.candidates.size(); ++i)
        if (d.candidates[i].algorithm == rule->algorithm) {
          d.chosen = d.candidates[i].algorithm;
          d.chosen_index = index[i];
          d.why = decision::reason::override;
          d.rule = rule->text;
          return d;
        }
      // A rule for every collective ("*:ring") leaves the calls its algorithm does not
      // run to the model; one that names the call, or a call's own algorithm, may not.
      if (rule->kind || pinned_) refuse_rule(*rule, desc.kind, d.candidates);
    }
    if (d.candidates.empty()) refuse_rule({}, desc.kind, d.candidates);
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < d.candidates.size(); ++i)
      if (d.candidates[i].seconds && (!best || *d.candidates[i].seconds < *d.candidates[*best].seconds)) best = i;
    d.why = best ? decision::reason::model : decision::reason::fallback;
    const std::size_t pick = best.value_or(0);
    d.chosen = d.candidates[pick].algorithm;
    d.chosen_index = index[pick];
    return d;
  }

  /// What build_on_shared_device would choose: as `decide` (which checks the rules), except
  /// that an allreduce with no MIMATRIX_ALGO rule of its own takes GDRAA, if it is a
  /// candidate, and so does every other collective on more than two ranks. On two, the
  /// ring's reduce-scatter, allgather and broadcast are one step where the pass
  /// synchronizes twice, for the same traffic (reduce-scatter, broadcast) or a quarter
  /// less (allgather). The network's predictions say nothing there, so the decision has
  /// none.
  template <class Topology>
    requires(builds_for<Candidates, Topology> || ...)
  decision decide_on_shared_device(const Topology& topo, const schedule::descriptor& desc) const {
    decision d = decide(topo, desc);
    if constexpr (gdraa_index < sizeof...(Candidates)) {
      const bool pays = desc.size > (desc.kind == schedule::collective::allreduce ? 1 : 2) &&
                        runs_collective<gdraa>(desc.kind);
      if (pays && d.why != decision::reason::override) {
        d.topology = topology::mesh::name;
        d.chosen = gdraa::name;
        d.chosen_index = gdraa_index;
        d.why = decision::reason::memory;
        d.candidates.clear();
      }
    }
    return d;
  }

  /// The schedule for a call on device memory that every rank reaches
  /// (transport::reaches_peers_device_memory: threads of one process, or processes of one
  /// node through CUDA IPC). There every rank reaches every other, whatever the network's
  /// topology, and memory traffic decides: GDRAA's collectives run as one pass a rank.
  /// Its allreduce makes 2p buffers of traffic where ring and halving-doubling make 2.5p
  /// and recursive doubling 3p; its reduce-scatter p+1 blocks a rank where the ring makes
  /// 3(p-1); its allgather p+1 blocks where the ring makes 2p; its broadcast p+1 buffers
  /// in all where the ring makes 2p (docs/device.md). A MIMATRIX_ALGO rule that matches
  /// the call still wins; the other collectives on two ranks are chosen as by `build`
  /// (decide_on_shared_device).
  template <class Topology>
    requires(builds_for<Candidates, Topology> || ...)
  schedule::schedule build_on_shared_device(const Topology& topo, const schedule::descriptor& desc, int rank) const {
    if constexpr (gdraa_index < sizeof...(Candidates)) {
      const decision d = decide_on_shared_device(topo, desc);
      if (d.chosen_index == gdraa_index) {  // also when a rule or call_options::algorithm names it
        log_decision(d, rank);
        return std::get<gdraa_index>(candidates_).build_on_shared_device(topology::mesh{}, desc, rank);
      }
    }
    return build(topo, desc, rank);
  }

  template <class Topology>
    requires(builds_for<Candidates, Topology> || ...)
  schedule::schedule build(const Topology& topo, const schedule::descriptor& desc, int rank) const {
    const decision d = decide(topo, desc);
    log_decision(d, rank);
    std::optional<schedule::schedule> out;
    build_chosen(d.chosen_index, topo, desc, rank, out, std::index_sequence_for<Candidates...>{});
    return std::move(*out);
  }

 private:
  template <std::size_t I>
  using candidate = std::tuple_element_t<I, std::tuple<Candidates...>>;

  /// GDRAA's position among the candidates; their number when it is not one.
  static constexpr std::size_t gdraa_index = [] {
    constexpr bool is_gdraa[] = {std::same_as<Candidates, gdraa>...};
    for (std::size_t i = 0; i < sizeof...(Candidates); ++i)
      if (is_gdraa[i]) return i;
    return sizeof...(Candidates);
  }();

  /// Rank 0 at INFO, every rank at TRACE (build runs once per call shape: plans are cached).
  static void log_decision(const decision& d, int rank) {
    if (rank == 0 ? log_enabled(log_level::info) : log_enabled(log_level::trace))
      log(rank == 0 ? log_level::info : log_level::trace, "rank " + std::to_string(rank) + ": " + to_string(d));
  }

  template <class Topology, std::size_t... I>
  void estimate_each(const model::network& net, const schedule::descriptor& desc,
                     std::vector<decision::estimate>& out, std::vector<std::size_t>& index,
                     std::index_sequence<I...>) const {
    const auto one = [&]<std::size_t K>() {
      using C = candidate<K>;
      if constexpr (builds_for<C, Topology>) {
        if (!runs_collective<C>(desc.kind)) return;
        std::optional<double> seconds;
        if constexpr (predicts_cost<C>) seconds = std::get<K>(candidates_).predict(net, desc);
        else seconds = model::predict(C::name, net, desc);
        out.push_back({C::name, seconds});
        index.push_back(K);
      }
    };
    (one.template operator()<I>(), ...);
  }

  template <class Topology, std::size_t... I>
  void build_chosen(std::size_t chosen, const Topology& topo, const schedule::descriptor& desc, int rank,
                    std::optional<schedule::schedule>& out, std::index_sequence<I...>) const {
    const auto one = [&]<std::size_t K>() {
      if constexpr (builds_for<candidate<K>, Topology>)
        if (K == chosen) out.emplace(std::get<K>(candidates_).build(topo, desc, rank));
    };
    (one.template operator()<I>(), ...);
  }

  /// Every rule must name a candidate that runs here, so a typo fails on the first call
  /// rather than when its size range first comes up.
  template <class Topology>
  void check_rules() const {
    const std::vector<std::string_view> usable = candidates_for<Topology>();
    for (std::size_t k = 0; k < settings_.rules.rules().size(); ++k) {
      const selection_rule& rule = settings_.rules.rules()[k];
      bool ok = false;
      for (std::string_view e : usable) ok = ok || e == rule.algorithm;
      if (ok) continue;
      std::string known;
      for (std::string_view e : usable) known += (known.empty() ? "" : ", ") + std::string(e);
      std::string topology = "this topology";
      if constexpr (requires { Topology::name; }) topology = "topology " + std::string(Topology::name);
      throw error(errc::invalid_argument, "MIMATRIX_ALGO: rule " + std::to_string(k + 1) + " '" + rule.text +
                                              "': no algorithm '" + rule.algorithm + "' runs on " + topology +
                                              "; expected one of: " + known);
    }
  }

  /// `rule` (none: the model's choice) picks no candidate that runs `kind`.
  [[noreturn]] static void refuse_rule(const std::optional<selection_rule>& rule, schedule::collective kind,
                                       const std::vector<decision::estimate>& running) {
    std::string known;
    for (const auto& e : running) known += (known.empty() ? "" : ", ") + std::string(e.algorithm);
    const std::string call(schedule::to_string(kind));
    if (!rule)
      throw error(errc::invalid_argument, "no candidate algorithm of this automatic runs " + call);
    throw error(errc::invalid_argument, "algorithm '" + rule->algorithm + "' (" + rule->text + ") does not run " +
                                            call + "; those that do here: " + (known.empty() ? "none" : known));
  }

  template <class C>
  static void fill(C& candidate, const policy& suggested) {
    if constexpr (tunable<C>) candidate.complete_policy(suggested);
  }

  automatic_settings settings_;
  bool pinned_ = false;  // the rules are a call's own algorithm (call_options::algorithm)
  std::tuple<Candidates...> candidates_;
};

/// BiGraph: plain halving-doubling in rank order puts up to a switch's nodes on one
/// bipartite link; HDRM's mapping keeps one flow a link.
template <>
struct cost_inputs<topology::bigraph> {
  static model::network adjust(const topology::bigraph& t, model::network net) {
    net.shared_link_flows = std::max(1, t.nodes_per_switch());
    return net;
  }
};

/// Hierarchical: the model prices intra-node phases on network::local.
template <class Local, class Global>
struct cost_inputs<topology::hierarchical<Local, Global>> {
  static model::network adjust(const topology::hierarchical<Local, Global>& t, model::network net) {
    net.ranks_per_node = t.local_size();
    return net;
  }
};

/// The candidates automatic chooses among; ties go to the earlier, so the algorithms
/// made for a topology come first. An algorithm joins by being added here: it needs
/// only `name` and `build`, the model knows it by name.
/// The calls added later (reduce, gather, scatter, alltoall) have their own candidates,
/// which price themselves (a `predict` member).
using automatic = basic_automatic<hdrm, gdraa, hierarchical<>, ring, halving_doubling, recursive_doubling, binomial,
                                  rabenseifner, linear, pairwise, bruck>;

}  // namespace mimatrix::algorithm
