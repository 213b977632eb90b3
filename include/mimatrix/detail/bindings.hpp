// How the plain engine (engine_core.hpp) reaches a transport, a topology and an
// algorithm: a few small function templates. Those over the transports, topologies and
// algorithms mimatrix::compiled holds are declared extern with separate compilation
// (impl/compiled_engines.hpp), so a user's unit emits no algorithm, topology check or
// transport call of its own for them, and parses none of their definitions for this.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "mimatrix/algorithm/automatic_fwd.hpp"
#include "mimatrix/algorithm/policy.hpp"
#include "mimatrix/core/config.hpp"
#include "mimatrix/core/digest.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/detail/engine_core.hpp"
#include "mimatrix/schedule/policy.hpp"
#include "mimatrix/topology/layout.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix::detail {

template <class Transport>
std::unique_ptr<operation> start_on(void* self, std::shared_ptr<const schedule::schedule> plan, const std::byte* input,
                                    std::byte* output, const signature& sig, const reduce::host_kernels& kernels,
                                    std::chrono::milliseconds timeout) {
  return static_cast<Transport*>(self)->start(std::move(plan), input, output, sig, kernels, timeout);
}

template <class Transport>
std::unique_ptr<operation> start_on_device_of(void* self, std::shared_ptr<const schedule::schedule> plan,
                                              const std::byte* input, std::byte* output, const signature& sig,
                                              const reduce::host_kernels& kernels, std::chrono::milliseconds timeout,
                                              const device::stream& stream) {
  return static_cast<Transport*>(self)->start(std::move(plan), input, output, sig, kernels, timeout, stream);
}
template <class Transport>
void fail_on(void* self, const signature& sig, errc code, const std::string& why) {
  static_cast<Transport*>(self)->fail(sig, code, why);
}

template <class Transport>
bool runs_one_sided_on(const void* self, const schedule::descriptor& d, std::size_t scratch_bytes) {
  return static_cast<const Transport*>(self)->runs_one_sided(d, scratch_bytes);
}

template <class Transport>
bool reaches_peers_device_memory_of(const void* self, const device::stream& stream) {
  return static_cast<const Transport*>(self)->reaches_peers_device_memory(stream);
}

template <class Transport>
bool runs_as_built_of(const void* self, const schedule::schedule& plan, const device::stream& stream) {
  return static_cast<const Transport*>(self)->runs_as_built(plan, stream);
}

template <class Transport>
std::unique_ptr<operation> start_batch_on(void* self, std::shared_ptr<const schedule::schedule> plan,
                                          const transport::batch_call& call, std::chrono::milliseconds timeout) {
  return static_cast<Transport*>(self)->start_batch(std::move(plan), call, timeout);
}

template <class Transport>
void fail_batch_on(void* self, const transport::batch_call& call, errc code, const std::string& why) {
  static_cast<Transport*>(self)->fail_batch(call, code, why);
}

/// `t` as the engine calls it.
template <class Transport>
transport_face face_of(Transport& t) {
  transport_face f;
  f.transport = &t;
  f.rank = t.rank();
  f.size = t.size();
  f.start = &start_on<Transport>;
  f.fail = &fail_on<Transport>;
  if constexpr (transport::runs_on_device<Transport>) f.start_on_device = &start_on_device_of<Transport>;
  if constexpr (transport::runs_one_sided_sometimes<Transport>) f.runs_one_sided = &runs_one_sided_on<Transport>;
  if constexpr (transport::reaches_peers_device_memory<Transport>)
    f.reaches_peers_device_memory = &reaches_peers_device_memory_of<Transport>;
  if constexpr (transport::runs_as_built_on_device<Transport>) f.runs_as_built = &runs_as_built_of<Transport>;
  if constexpr (transport::runs_batches<Transport>) {
    f.start_batch = &start_batch_on<Transport>;
    f.fail_batch = &fail_batch_on<Transport>;
  }
  f.native_one_sided = transport::runs_one_sided<Transport>;
  if constexpr (transport::has_progress_engine<Transport>) f.progress = &t.progress();
  return f;
}

/// The tuning `t` suggests to algorithms that leave it open (transport::suggests_policy).
template <class Transport>
std::optional<schedule::policy> suggestion_of(const Transport& t) {
  if constexpr (transport::suggests_policy<Transport>) return t.suggested_policy();
  else return std::nullopt;
}

// The return type (schedule::schedule) is spelled through Algorithm: a unit that builds no
// schedule need not parse schedule.hpp.
template <class Topology, class Algorithm>
auto build_with(const void* bound, const schedule::descriptor& d, int rank)
    -> decltype(std::declval<const Algorithm&>().build(std::declval<const Topology&>(), d, rank)) {
  const auto& [topo, algo] = *static_cast<const std::pair<Topology, Algorithm>*>(bound);
  return algo.build(topo, d, rank);
}

template <class Topology, class Algorithm>
auto build_on_shared_device_with(const void* bound, const schedule::descriptor& d, int rank)
    -> decltype(std::declval<const Algorithm&>().build_on_shared_device(std::declval<const Topology&>(), d, rank)) {
  const auto& [topo, algo] = *static_cast<const std::pair<Topology, Algorithm>*>(bound);
  return algo.build_on_shared_device(topo, d, rank);
}

/// `algo` on `topo` for a group of `size` ranks: throws `invalid_argument` if the topology
/// cannot hold them, and gives the algorithm `suggested` for what it leaves open.
template <class Topology, class Algorithm>
schedule_source bind_algorithm(Topology topo, Algorithm algo, int size, std::optional<schedule::policy> suggested) {
  topo.check(size);
  if constexpr (algorithm::tunable<Algorithm>)
    if (suggested) algo.complete_policy(*suggested);
  // algorithm::automatic says itself, at INFO, what it chose and why.
  constexpr bool chooses = requires { requires Algorithm::name == std::string_view("automatic"); };
  const std::uint64_t agreement =
      mimatrix::digest{}.mix(topology::digest_of(topo, size)).mix(algorithm::digest_of(algo)).value();
  schedule_source source{std::make_shared<const std::pair<Topology, Algorithm>>(std::move(topo), std::move(algo)),
                         &build_with<Topology, Algorithm>, chooses};
  source.agreement = agreement;
  if constexpr (requires(const Algorithm& a, const Topology& t, const schedule::descriptor& d) {
                  a.build_on_shared_device(t, d, 0);
                })
    source.build_on_shared_device = &build_on_shared_device_with<Topology, Algorithm>;
  return source;
}

/// algorithm::automatic on `*topology` (automatic_source). Spelled through `Automatic`, so
/// that it parses without algorithm/automatic.hpp: with separate compilation the library
/// holds it for ring, mesh and BiGraph (impl/compiled_engines.hpp).
template <class Topology, class Automatic = algorithm::automatic>
schedule_source automatic_on(const void* topology, const std::string& pinned, int rank, int size,
                             const std::optional<schedule::policy>& suggested) {
  static_assert(requires { sizeof(Automatic); },
                "mimatrix: collectives<> on a topology other than ring, mesh and BiGraph needs "
                "algorithm::automatic: include \"mimatrix/algorithm/automatic.hpp\"");
  Automatic chooser;  // reads MIMATRIX_ALGO, which must be well formed even when a call names one
  if (!pinned.empty()) {
    bool runs = false;
    std::string list;
    for (std::string_view name : Automatic::template candidates_for<Topology>()) {
      runs = runs || name == pinned;
      list += (list.empty() ? "" : ", ") + std::string(name);
    }
    if (!runs)
      throw error(errc::invalid_argument, "rank " + std::to_string(rank) + ": algorithm '" + pinned +
                                              "' is unknown or does not run on this topology, which runs " + list +
                                              " (empty or 'automatic': the cost model chooses)");
    using rules = std::remove_cvref_t<decltype(chooser.settings().rules)>;
    chooser.pin(rules::parse("*:" + pinned, "call_options::algorithm"));
  }
  return bind_algorithm(*static_cast<const Topology*>(topology), std::move(chooser), size, suggested);
}

}  // namespace mimatrix::detail

#if !MIMATRIX_HEADER_ONLY
#include "mimatrix/detail/impl/compiled_engines.hpp"
#endif
