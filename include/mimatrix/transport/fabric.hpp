// transport::fabric: ranks are processes, on one machine or many, connected by libfabric
// reliable-datagram endpoints (shm, tcp;ofi_rxm here; verbs;ofi_rxm or efa on clusters).
// Ranks find each other through the bootstrap store; data moves as tagged messages, and
// one-sided steps (GDRAA's writes) as RMA writes with remote CQ data into a window every
// rank registers once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "mimatrix/algorithm/policy.hpp"
#include "mimatrix/bootstrap/env.hpp"
#include "mimatrix/bootstrap/rendezvous.hpp"
#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/signature.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/transport/fabric/endpoint.hpp"
#include "mimatrix/transport/fabric/execution.hpp"
#include "mimatrix/transport/progress.hpp"

namespace mimatrix::transport {

/// How a fabric endpoint is opened. Each field left empty or default is read from the
/// environment (the variable named beside it), so one binary runs on any cluster.
struct fabric_options {
  /// libfabric provider, e.g. "shm", "tcp;ofi_rxm", "verbs;ofi_rxm", "efa".
  /// Empty: MIMATRIX_PROVIDER, else FI_PROVIDER, else "shm" when every rank runs on this
  /// host, else libfabric's first choice.
  std::string provider;
  /// How long start-up (store, address exchange) may take. MIMATRIX_STARTUP_TIMEOUT_MS.
  std::chrono::milliseconds startup_timeout{60000};
  /// Register every buffer even when the provider does not ask for it (tests the
  /// registration path on shm and tcp). MIMATRIX_FABRIC_REGISTER=always.
  bool register_always = false;
  /// Memory for receiving recv_reduce data before it is reduced, reused in slots of the
  /// schedule's chunk size: small enough to stay in cache, large enough to keep several
  /// messages in flight. MIMATRIX_STAGING_BYTES.
  std::size_t staging_bytes = std::size_t(1) << 20;
  /// Each half of the RMA window one-sided calls write into (output plus landing slots;
  /// memory is committed only where touched). Calls that do not fit, broadcasts, and
  /// every call after a failure run as messages instead. 0: no window.
  /// MIMATRIX_WINDOW_BYTES.
  std::size_t window_bytes = std::size_t(128) << 20;
  /// Messages of up to 512 bytes between ranks on one host go through shared-memory
  /// mailboxes instead of the provider (a third of libfabric shm's latency). 1: always,
  /// 0: never, -1: with the shm provider only. MIMATRIX_MAILBOX=on|off|auto. Set alike on
  /// every rank.
  int mailbox = -1;
  /// Chunks of up to chunk_bytes between ranks on one host go through shared-memory rings
  /// of 4 slots a pair: the sender copies in, the receiver reduces straight out, where the
  /// provider would copy once more (shm: process_vm_readv into staging). 1: always, 0:
  /// never, -1: with the shm provider only. MIMATRIX_BULK=on|off|auto. Set alike on
  /// every rank. Memory: 4 chunks per ordered pair of this host's ranks.
  int bulk = -1;
  /// The chunk the collectives cut large messages into, for algorithms whose policy
  /// leaves it open. 0: by provider (chunk_for_provider). MIMATRIX_CHUNK_BYTES. Set alike
  /// on every rank.
  std::size_t chunk_bytes = 0;
};

/// One rank's endpoint in a group of processes.
///
/// @code
///   mimatrix::communicator<mimatrix::transport::fabric> comm;   // RANK, WORLD_SIZE, MASTER_ADDR...
///   mimatrix::allreduce<mimatrix::transport::fabric, mimatrix::topology::ring, mimatrix::reduce::sum<float>> sum(comm);
///   sum(gradients);
/// @endcode
///
/// @par Thread Safety
/// One thread at a time (the communicator over it has the same rule), besides its
/// progress thread (progress_mode::thread). Copies share the endpoint.
class fabric {
 public:
  static constexpr const char* name = "fabric";
  /// Not every call can run one-sided steps here: runs_one_sided() answers per call and
  /// the collectives lower the others to messages.
  static constexpr bool native_one_sided = false;

  /// Rank, size and store from the environment (see bootstrap/env.hpp, rendezvous.hpp).
  explicit fabric(fabric_options options = {}) : fabric(bootstrap::identity_from_environment(), nullptr, options) {}

  /// An explicit identity and store (nullptr: open the store the environment names).
  fabric(const bootstrap::identity& id, std::shared_ptr<bootstrap::store> store, fabric_options options = {}) {
    options = resolve(std::move(options), id);
    if (!store) store = std::shared_ptr<bootstrap::store>(bootstrap::open_store(id, options.startup_timeout));
    endpoint_ = std::make_shared<detail::fabric_endpoint>(
        id, std::move(store),
        detail::fabric_settings{.provider = options.provider,
                                .startup_timeout = options.startup_timeout,
                                .register_always = options.register_always,
                                .staging_bytes = options.staging_bytes,
                                .window_bytes = options.window_bytes,
                                .mailbox = options.mailbox,
                                .bulk = options.bulk,
                                .chunk_bytes = options.chunk_bytes});
  }

  /// The chunk that suits a provider (fabric_options::chunk_bytes = 0).
  static std::size_t chunk_for_provider(const std::string& provider) {
    return detail::fabric_endpoint::chunk_for_provider(provider);
  }

  int rank() const { return endpoint_->rank(); }
  int size() const { return endpoint_->size(); }
  /// The provider libfabric opened, e.g. "shm" or "tcp;ofi_rxm".
  const std::string& provider() const { return endpoint_->provider(); }
  /// Buffers registered so far, and lookups the cache answered (FI_MR_LOCAL providers).
  std::size_t registrations() const { return endpoint_->registrations().registrations(); }
  std::size_t registration_hits() const { return endpoint_->registrations().hits(); }
  /// Registrations the cache holds now.
  std::size_t live_registrations() const { return endpoint_->registrations().live(); }

  /// Tells the registration cache that [data, data + bytes) is about to be freed (as
  /// ncclCommDeregister): its registrations are dropped, so memory allocated later at
  /// the same address is registered afresh instead of reaching the provider's old pages.
  /// Needed only by providers that register buffers (FI_MR_LOCAL: verbs, efa) and only
  /// for memory that is freed while the communicator lives. Returns the registrations
  /// dropped; those a call in flight may use are closed when it ends.
  std::size_t deregister(const void* data, std::size_t bytes) {
    auto lock = endpoint_->engine().lock();
    return endpoint_->forget_registrations(data, bytes);
  }
  /// Each half of the RMA window all ranks share (0: none; one-sided steps become messages).
  std::size_t window_bytes() const { return endpoint_->window_half_bytes(); }
  /// Calls that ran their one-sided steps as RMA writes.
  std::size_t one_sided_calls() const { return endpoint_->one_sided_calls(); }
  /// Whether small messages to ranks on this host go through shared-memory mailboxes.
  bool uses_mailboxes() const { return endpoint_->mailboxes() != nullptr; }
  /// Whether chunks to ranks on this host go through shared-memory rings (fabric_options::bulk).
  bool uses_bulk_rings() const { return endpoint_->bulk_mailboxes() != nullptr; }

  /// The tuning the collectives give algorithms that leave it open (fabric_options::chunk_bytes).
  algorithm::policy suggested_policy() const { return {endpoint_->chunk_bytes()}; }

  /// Whether call `d`, whose schedules need at most `scratch_bytes` of scratch on any
  /// rank, runs its one-sided steps as RMA writes. Every rank answers alike, except after
  /// a failure, which ends one-sided calls (a late write of the failed call may land).
  /// Broadcast is left out: its root may run calls ahead of the others, and a later
  /// write could land in a half a peer still reads.
  bool runs_one_sided(const schedule::descriptor& d, std::size_t scratch_bytes) const {
    return d.kind != schedule::collective::broadcast && endpoint_->one_sided_usable() &&
           (d.output_bytes() + 63) / 64 * 64 + scratch_bytes <= endpoint_->window_half_bytes();
  }

  /// The calls in flight on this endpoint, and who advances them.
  progress_engine& progress() { return endpoint_->engine(); }

  /// Starts executing `plan`: it posts what it can now.
  std::unique_ptr<mimatrix::detail::operation> start(std::shared_ptr<const schedule::schedule> plan,
                                                     const std::byte* input, std::byte* output,
                                                     const signature& sig, const reduce::host_kernels& kernels,
                                                     std::chrono::milliseconds timeout) {
    auto lock = endpoint_->engine().lock();
    return std::make_unique<detail::fabric_execution>(endpoint_, std::move(plan), input, output, sig, kernels,
                                                      timeout);
  }

  /// This rank will not take part in call `sig`: every peer fails it with `code` at once.
  void fail(const signature& sig, errc code, const std::string& why) {
    auto lock = endpoint_->engine().lock();
    endpoint_->announce_failure(sig.sequence, code, why);
  }

 private:
  static fabric_options resolve(fabric_options o, const bootstrap::identity& id) {
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
    if (o.provider.empty()) o.provider = env("MIMATRIX_PROVIDER");
    if (o.provider.empty()) o.provider = env("FI_PROVIDER");
    if (o.provider.empty() && id.local_size == id.size) o.provider = "shm";
    if (auto v = number("MIMATRIX_STARTUP_TIMEOUT_MS", 1, "a positive number of milliseconds"))
      o.startup_timeout = std::chrono::milliseconds(*v);
    if (auto v = number("MIMATRIX_STAGING_BYTES", 1, "a positive number of bytes")) o.staging_bytes = std::size_t(*v);
    if (auto v = number("MIMATRIX_CHUNK_BYTES", 1, "a positive number of bytes")) o.chunk_bytes = std::size_t(*v);
    if (auto v = number("MIMATRIX_WINDOW_BYTES", 0, "a number of bytes (0: no RMA window)"))
      o.window_bytes = std::size_t(*v);
    // on | off | auto as 1 | 0 | -1, if the variable is set.
    const auto switch_of = [&](const char* name, int& into) {
      const std::string v = env(name);
      if (v.empty()) return;
      if (v != "on" && v != "off" && v != "auto") throw bad(name, "'on', 'off' or 'auto'", v);
      into = v == "on" ? 1 : v == "off" ? 0 : -1;
    };
    switch_of("MIMATRIX_MAILBOX", o.mailbox);
    switch_of("MIMATRIX_BULK", o.bulk);
    if (const std::string reg = env("MIMATRIX_FABRIC_REGISTER"); !reg.empty()) {
      if (reg != "always" && reg != "auto") throw bad("MIMATRIX_FABRIC_REGISTER", "'always' or 'auto'", reg);
      o.register_always = reg == "always";
    }
    return o;
  }

  std::shared_ptr<detail::fabric_endpoint> endpoint_;
};

}  // namespace mimatrix::transport
