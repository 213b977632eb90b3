// The concept every transport models: it knows its rank and group size, starts the
// execution of a schedule with the host kernels of its (dtype, op), and tells its peers
// when a call failed locally.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <memory>
#include <string>

#include "mimatrix/core/error.hpp"
#include "mimatrix/core/operation.hpp"
#include "mimatrix/schedule/policy.hpp"
#include "mimatrix/transport/fwd.hpp"  // the concepts need no definitions of what they name

namespace mimatrix::transport {

template <class T>
concept backend = requires(T& t, const T& ct, std::shared_ptr<const schedule::schedule> plan, const std::byte* in,
                           std::byte* out, const signature& sig, const reduce::host_kernels& kernels,
                           std::chrono::milliseconds timeout, const std::string& why) {
  { ct.rank() } -> std::same_as<int>;
  { ct.size() } -> std::same_as<int>;
  { t.start(plan, in, out, sig, kernels, timeout) } -> std::same_as<std::unique_ptr<mimatrix::detail::operation>>;
  t.fail(sig, errc::invalid_argument, why);  // this rank will not take part in call `sig`
};

/// Transports that run calls on device memory themselves, queued on the caller's stream
/// (device_steps.hpp); the collectives stage the others' through host memory.
template <class T>
concept runs_on_device = requires(T& t, std::shared_ptr<const schedule::schedule> plan, const std::byte* in,
                                  std::byte* out, const signature& sig, const reduce::host_kernels& kernels,
                                  std::chrono::milliseconds timeout, const device::stream& stream) {
  { t.start(plan, in, out, sig, kernels, timeout, stream) } -> std::same_as<std::unique_ptr<mimatrix::detail::operation>>;
};

/// Transports that run on device memory and can tell whether every peer reaches this
/// rank's device memory of a stream's port (transport::inproc always; transport::fabric
/// within a node through CUDA IPC). Every rank answers alike. Allreduces there make the
/// least memory traffic as GDRAA's one pass a rank, which algorithm::automatic then takes.
template <class T>
concept reaches_peers_device_memory = runs_on_device<T> && requires(const T& t, const device::stream& stream) {
  { t.reaches_peers_device_memory(stream) } -> std::same_as<bool>;
};

/// Transports that lower one-sided schedules (not runs_one_sided) but run some plans on
/// device memory as built, their one-sided steps carried another way (transport::fabric:
/// GDRAA's collectives as one pass a rank, with no RMA window). Every rank answers alike.
template <class T>
concept runs_as_built_on_device = requires(const T& t, const schedule::schedule& plan, const device::stream& stream) {
  { t.runs_as_built(plan, stream) } -> std::same_as<bool>;
};

/// Transports that run p2p batches (send, recv, grouped calls; transport/batch_call.hpp):
/// they start rank's part of a batch and, when this rank refuses one, fail its peers' parts
/// at once. transport::inproc does; fabric's is the next increment, and collectives<> on a
/// transport that does not model this refuses send and recv at compile time.
template <class T>
concept runs_batches = requires(T& t, std::shared_ptr<const schedule::schedule> plan, const batch_call& call,
                                std::chrono::milliseconds timeout, const std::string& why) {
  { t.start_batch(plan, call, timeout) } -> std::same_as<std::unique_ptr<mimatrix::detail::operation>>;
  t.fail_batch(call, errc::invalid_argument, why);
};

/// Transports whose calls share a progress engine (every test() or wait() advances them
/// all; progress_mode::thread adds a thread). The communicator sets its mode.
template <class T>
concept has_progress_engine = requires(T& t) {
  { t.progress() } -> std::same_as<progress_engine&>;
};

/// Whether `T` runs write, notify and wait itself (`static constexpr bool
/// native_one_sided = true`); for other transports the collectives lower those steps to
/// messages with schedule::lower_one_sided.
template <class T>
inline constexpr bool runs_one_sided = requires { requires T::native_one_sided; };

/// Transports that run one-sided steps for some calls only (transport::fabric, over its
/// RMA window) answer per call, given the most scratch any rank's schedule needs; every
/// rank must answer alike. The collectives lower the calls they refuse.
template <class T>
concept runs_one_sided_sometimes = requires(const T& t, const schedule::descriptor& d, std::size_t scratch) {
  { t.runs_one_sided(d, scratch) } -> std::same_as<bool>;
};

/// Transports that know the tuning that suits them (transport::fabric: larger chunks
/// over tcp, whose every message over 16 KiB costs a rendezvous round trip). The
/// collectives hand the suggestion to their algorithm, which keeps whatever the user set.
template <class T>
concept suggests_policy = requires(const T& t) {
  { t.suggested_policy() } -> std::same_as<schedule::policy>;
};

}  // namespace mimatrix::transport
