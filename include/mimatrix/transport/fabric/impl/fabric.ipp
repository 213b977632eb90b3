// transport::fabric's definitions: in every translation unit when header-only, or once,
// in mimatrix::compiled (or the user's impl/src.hpp unit), with separate compilation.
#pragma once

#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>

#include "mimatrix/bootstrap/env.hpp"
#include "mimatrix/bootstrap/rendezvous.hpp"
#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/core/options.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "mimatrix/transport/fabric/endpoint.hpp"
#include "mimatrix/transport/fabric/execution.hpp"
#include "mimatrix/transport/progress.hpp"

namespace mimatrix::transport {

MIMATRIX_DECL fabric::fabric(fabric_options options) : fabric(bootstrap::identity_from_environment(), nullptr, options) {}

MIMATRIX_DECL fabric::fabric(const bootstrap::identity& id, std::shared_ptr<bootstrap::store> store,
                             fabric_options options) {
  options = resolve(std::move(options), id);
  if (!store) store = std::shared_ptr<bootstrap::store>(bootstrap::open_store(id, *options.startup_timeout));
  endpoint_ = std::make_shared<detail::fabric::endpoint>(
      id, std::move(store),
      detail::fabric::settings{.provider = options.provider,
                               .startup_timeout = *options.startup_timeout,
                               .register_always = *options.register_always,
                               .staging_bytes = *options.staging_bytes,
                               .window_bytes = *options.window_bytes,
                               .mailbox = *options.mailbox,
                               .bulk = *options.bulk,
                               .chunk_bytes = *options.chunk_bytes,
                               .exit_when_stuck = *options.exit_when_stuck,
                               .group = options.group});
  options_ = std::move(options);
}

MIMATRIX_DECL std::optional<fabric> fabric::split(int color, int key) const {
  auto part = endpoint_->split(color, key);
  if (!part) return std::nullopt;
  fabric_options o = options_;
  o.provider = endpoint_->provider();  // as opened, not as asked: the parent's ranks agreed on it
  o.group = part->group;
  if (color == same_host) {  // one host by construction: shared memory reaches every rank, whatever the provider
    if (o.mailbox.value_or(-1) < 0) o.mailbox = 1;
    if (o.bulk.value_or(-1) < 0) o.bulk = 1;
  }
  return fabric(part->id, endpoint_->store(), std::move(o));
}

MIMATRIX_DECL void fabric::share_fate(fabric& other) {
  endpoint_->fate() = other.endpoint_->fate() = std::make_shared<shared_fate>();
}

MIMATRIX_DECL void fabric::abort_with(const fabric& part) {
  auto lock = endpoint_->engine().lock();
  endpoint_->abort_with(part.endpoint_);
}

MIMATRIX_DECL void fabric::abort(const std::string& why) {
  {
    auto lock = endpoint_->engine().lock();  // between rounds: no call is touching the endpoint
    endpoint_->abort_all(why);
  }
  // The aborts the provider pushed back (a peer outside mimatrix, a connection not yet up)
  // go out for up to 200 ms, the lock taken a round at a time: this rank's own calls fail
  // meanwhile, as its peers' do (they waited those 200 ms behind the lock before).
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < until) {
    bool moved = false;
    {
      auto lock = endpoint_->engine().lock();
      if (!endpoint_->controls_pending()) break;
      moved = endpoint_->progress();
    }
    if (!moved) std::this_thread::yield();
  }
}

MIMATRIX_DECL std::optional<error> fabric::async_error() {
  auto lock = endpoint_->engine().lock();
  // Aborts and failures other ranks sent. Over tcp;ofi_rxm a peer's first message waits
  // for a connection, which takes progress on both sides over time: without the progress
  // thread (which reads them between calls), a few asks.
  (void)endpoint_->progress();
  if (const auto* a = endpoint_->aborted()) return error(a->code, "rank " + std::to_string(rank()) + ": " + a->message);
  if (const auto* d = endpoint_->disabled()) return error(d->code, "rank " + std::to_string(rank()) + ": " + d->message);
  if (const auto* f = endpoint_->latest_failure()) return error(f->code, "rank " + std::to_string(rank()) + ": " + f->message);
  if (const std::string gone = endpoint_->ended_peers(); !gone.empty())
    return error(errc::peer_lost, "rank " + std::to_string(rank()) + ": " + gone + " exited or was killed");
  return std::nullopt;
}

MIMATRIX_DECL std::shared_ptr<bootstrap::store> fabric::store() const { return endpoint_->store(); }

MIMATRIX_DECL bootstrap::identity fabric::identity() const { return endpoint_->identity(); }

MIMATRIX_DECL std::size_t fabric::chunk_for_provider(const std::string& provider) {
  return detail::fabric::endpoint::chunk_for_provider(provider);
}

MIMATRIX_DECL int fabric::rank() const { return endpoint_->rank(); }
MIMATRIX_DECL int fabric::size() const { return endpoint_->size(); }
MIMATRIX_DECL int fabric::world_rank() const {
  const int w = endpoint_->identity().world_rank;
  return w < 0 ? endpoint_->rank() : w;
}
MIMATRIX_DECL std::string fabric::group() const { return endpoint_->group_instance(); }
MIMATRIX_DECL const std::string& fabric::provider() const { return endpoint_->provider(); }
MIMATRIX_DECL std::size_t fabric::registrations() const { return endpoint_->registrations().registrations(); }
MIMATRIX_DECL std::size_t fabric::registration_hits() const { return endpoint_->registrations().hits(); }
MIMATRIX_DECL std::size_t fabric::live_registrations() const { return endpoint_->registrations().live(); }

MIMATRIX_DECL std::size_t fabric::deregister(const void* data, std::size_t bytes) {
  auto lock = endpoint_->engine().lock();
  return endpoint_->forget_registrations(data, bytes);
}

MIMATRIX_DECL std::size_t fabric::window_bytes() const { return endpoint_->window_half_bytes(); }
MIMATRIX_DECL std::size_t fabric::one_sided_calls() const { return endpoint_->one_sided_calls(); }
MIMATRIX_DECL bool fabric::uses_mailboxes() const { return endpoint_->mailboxes() != nullptr; }
MIMATRIX_DECL bool fabric::uses_bulk_rings() const { return endpoint_->bulk_mailboxes() != nullptr; }
MIMATRIX_DECL schedule::policy fabric::suggested_policy() const { return {endpoint_->chunk_bytes()}; }

MIMATRIX_DECL bool fabric::runs_one_sided(const schedule::descriptor& d, std::size_t scratch_bytes) const {
  return d.kind != schedule::collective::broadcast && endpoint_->one_sided_usable() &&
         (d.output_bytes(rank()) + 63) / 64 * 64 + scratch_bytes <= endpoint_->window_half_bytes();
}

MIMATRIX_DECL bool fabric::reaches_peers_device_memory(const device::stream& caller) const {
  return caller.device &&
         endpoint_->reaches_peers_device_memory(*caller.device, detail::fabric::execution::direct_sync_bytes());
}

MIMATRIX_DECL bool fabric::runs_as_built(const schedule::schedule& plan, const device::stream& caller) const {
  return caller.device && detail::fabric::execution::writes_peers_directly(*endpoint_, plan, *caller.device);
}

MIMATRIX_DECL progress_engine& fabric::progress() { return endpoint_->engine(); }

MIMATRIX_DECL std::unique_ptr<mimatrix::detail::operation> fabric::start(std::shared_ptr<const schedule::schedule> plan,
                                                                         const std::byte* input, std::byte* output,
                                                                         const signature& sig,
                                                                         const reduce::host_kernels& kernels,
                                                                         std::chrono::milliseconds timeout) {
  auto lock = endpoint_->engine().lock();
  endpoint_->entered(sig.sequence);
  return std::make_unique<detail::fabric::execution>(endpoint_, std::move(plan), input, output, sig, kernels,
                                                     timeout);
}

MIMATRIX_DECL std::unique_ptr<mimatrix::detail::operation> fabric::start(std::shared_ptr<const schedule::schedule> plan,
                                                                         const std::byte* input, std::byte* output,
                                                                         const signature& sig,
                                                                         const reduce::host_kernels& kernels,
                                                                         std::chrono::milliseconds timeout,
                                                                         const device::stream& caller) {
  progress_engine& engine = endpoint_->engine();
  if (engine.mode() != progress_mode::thread) engine.set_mode(progress_mode::thread);
  {
    auto lock = engine.lock();
    if (!device_) device_ = std::make_shared<device::rank_streams>();
  }
  return device_->made_outside([&]() -> std::unique_ptr<mimatrix::detail::operation> {
    auto lock = engine.lock();
    endpoint_->entered(sig.sequence);
    return std::make_unique<detail::fabric::execution>(endpoint_, plan, input, output, sig, kernels, timeout, &caller,
                                                       device_.get());
  });
}

MIMATRIX_DECL void fabric::fail(const signature& sig, errc code, const std::string& why) {
  auto lock = endpoint_->engine().lock();
  endpoint_->entered(sig.sequence);
  endpoint_->announce_failure(sig.sequence, code, why);
}

MIMATRIX_DECL fabric_options fabric::resolve(fabric_options o, const bootstrap::identity& id) {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  const auto bad = [&](const char* name, const std::string& want, const std::string& got) {
    return error(errc::invalid_argument,
                 "rank " + std::to_string(id.rank) + ": " + name + " must be " + want + ", got '" + got + "'");
  };
  // A number of at least `least`, if the variable is set.
  const auto number = [&](const char* name, long long least, const std::string& want) -> std::optional<long long> {
    const std::string text = env(name);
    if (text.empty()) return std::nullopt;
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (*end != '\0' || v < least) throw bad(name, want, text);
    return v;
  };
  // What the caller left unset: the variable if set, else `fallback`.
  const auto bytes = [&](std::optional<std::size_t>& field, const char* name, long long least, const std::string& want,
                         std::size_t fallback) {
    if (field) return;
    const auto v = number(name, least, want);
    field = v ? std::size_t(*v) : fallback;
  };
  // on | off | auto as 1 | 0 | -1, if the variable is set; else auto.
  const auto switch_of = [&](std::optional<int>& field, const char* name) {
    if (field) return;
    const std::string v = env(name);
    if (!v.empty() && v != "on" && v != "off" && v != "auto") throw bad(name, "'on', 'off' or 'auto'", v);
    field = v == "on" ? 1 : v == "off" ? 0 : -1;
  };
  if (o.provider.empty()) o.provider = env("MIMATRIX_PROVIDER");
  if (o.provider.empty()) o.provider = env("FI_PROVIDER");
  if (o.provider.empty() && id.local_size == id.size) o.provider = "shm";
  if (!o.startup_timeout) {
    const auto v = number("MIMATRIX_STARTUP_TIMEOUT_MS", 1, "a positive number of milliseconds");
    o.startup_timeout = std::chrono::milliseconds(v ? *v : 60000);
  }
  o.startup_timeout = bounded_timeout(*o.startup_timeout);  // 9223372036854775807 ms: "never", not an overflow
  bytes(o.staging_bytes, "MIMATRIX_STAGING_BYTES", 1, "a positive number of bytes", std::size_t(1) << 20);
  bytes(o.chunk_bytes, "MIMATRIX_CHUNK_BYTES", 1, "a positive number of bytes", 0);
  bytes(o.window_bytes, "MIMATRIX_WINDOW_BYTES", 0, "a number of bytes (0: no RMA window)", std::size_t(128) << 20);
  switch_of(o.mailbox, "MIMATRIX_MAILBOX");
  switch_of(o.bulk, "MIMATRIX_BULK");
  if (!o.exit_when_stuck) {
    const std::string stuck = env("MIMATRIX_STUCK_PROVIDER");
    if (!stuck.empty() && stuck != "exit" && stuck != "wait") throw bad("MIMATRIX_STUCK_PROVIDER", "'exit' or 'wait'", stuck);
    o.exit_when_stuck = stuck != "wait";
  }
  // Read where a call needs them (endpoint::device_ipc, device_hmem); checked here, where
  // the rank is known, so that a typo fails at once rather than meaning "on".
  const std::string ipc = env("MIMATRIX_DEVICE_IPC");
  if (!ipc.empty() && ipc != "0" && ipc != "1" && ipc != "on" && ipc != "off")
    throw bad("MIMATRIX_DEVICE_IPC", "'1' or '0' ('on' or 'off')", ipc);
  const std::string hmem = env("MIMATRIX_DEVICE_HMEM");
  if (!hmem.empty() && hmem != "auto" && hmem != "on" && hmem != "0" && hmem != "off")
    throw bad("MIMATRIX_DEVICE_HMEM", "'auto', 'on' or '0' ('off')", hmem);
  if (!o.register_always) {
    const std::string reg = env("MIMATRIX_FABRIC_REGISTER");
    if (!reg.empty() && reg != "always" && reg != "auto") throw bad("MIMATRIX_FABRIC_REGISTER", "'always' or 'auto'", reg);
    o.register_always = reg == "always";
  }
  return o;
}

}  // namespace mimatrix::transport
