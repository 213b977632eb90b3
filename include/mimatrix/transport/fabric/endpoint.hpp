// One rank's libfabric endpoint: provider selection, the reliable-datagram endpoint with
// its completion queue and address vector, the address exchange through the rendezvous
// store, and the progress engine that hands completions to the calls they belong to.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mimatrix/bootstrap/env.hpp"
#include "mimatrix/bootstrap/rendezvous.hpp"
#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/policy.hpp"
#include "mimatrix/transport/fabric/error.hpp"
#include "mimatrix/transport/fabric/mailbox.hpp"
#include "mimatrix/transport/fabric/registration_cache.hpp"
#include "mimatrix/transport/fabric/shm_leftovers.hpp"
#include "mimatrix/transport/fabric/window.hpp"
#include "mimatrix/transport/fabric/wire.hpp"
#include "mimatrix/transport/progress.hpp"
#include "mimatrix/transport/step_executor.hpp"

namespace mimatrix::transport::detail::fabric {

/// What an endpoint is built with (see transport::fabric_options for the public form).
struct settings {
  std::string provider;  // empty: libfabric's first choice
  std::chrono::milliseconds startup_timeout{60000};
  bool register_always = false;
  std::size_t staging_bytes = std::size_t(1) << 20;
  std::size_t window_bytes = std::size_t(128) << 20;  // each half; 0: no RMA window
  int mailbox = -1;  // small messages between local ranks through shared memory: 1, 0, -1 for shm only
  int bulk = -1;     // chunks between local ranks through shared memory: 1, 0, -1 for shm only
  std::size_t bulk_slots = 4;  // a bulk ring's slots, each of chunk_bytes
  std::size_t chunk_bytes = 0;  // 0: by provider (endpoint::chunk_for_provider)
};

class call;

/// A posted libfabric operation. `ctx` comes first: the completion's op_context is the
/// address of this object. A call that fails orphans its requests (owner = nullptr), and
/// the endpoint reclaims each one when the provider finally completes or cancels it.
struct posted_op {
  enum class purpose : std::uint8_t { data, control_send, control_recv };

  fi_context2 ctx{};
  call* owner = nullptr;
  std::uint32_t step = 0;
  purpose what = purpose::data;
  std::vector<std::byte> payload;  // control messages only
};

/// The part of a call the endpoint talks to.
class call {
 public:
  virtual void on_complete(posted_op& r, const fi_cq_tagged_entry& e) = 0;
  virtual void on_error(posted_op& r, const fi_cq_err_entry& e) = 0;
  /// Drives the call until it ends (done or failed).
  virtual void finish() = 0;

 protected:
  ~call() = default;
};

/// A block of host memory that grows to the largest size asked of it and is then reused.
struct arena {
  struct free_aligned {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  std::unique_ptr<std::byte[], free_aligned> data;
  std::size_t bytes = 0;

  /// At least `n` bytes (their old contents are not kept).
  std::byte* reserve(std::size_t n) {
    if (n > bytes) {
      std::size_t rounded = 4096;  // powers of two: calls of nearby sizes share
      while (rounded < n) rounded *= 2;
      data.reset(static_cast<std::byte*>(::operator new[](rounded, std::align_val_t(64))));
      bytes = rounded;
    }
    return data.get();
  }
};

/// Where one step of a call stands.
struct step_state {
  posted_op* request = nullptr;    // posted and not yet completed
  std::size_t slot = 0;            // recv_reduce: its staging slot, once it has one
  local_mailboxes* box = nullptr;  // the shared-memory mailbox it moves through (null: the provider)
  bool polling = false;            // a mailbox receive looked for in every round
};

/// A call's memory (scratch, staging) and the fabric part of its bookkeeping, kept by the
/// endpoint across calls so that the steady state allocates nothing.
struct workspace {
  arena scratch, staging;
  std::vector<step_state> state;       // per step
  std::vector<std::uint32_t> reduces;  // the recv_reduce steps, in schedule order
  std::vector<std::size_t> free_slots;
  std::vector<std::uint32_t> polls;    // mailbox receives whose dependencies are done
  std::vector<std::uint32_t> looked;   // mailbox reads: per peer and mailbox, the last poll round
};

struct failure {
  errc code;
  std::string message;
};

/// How a rank waits on the provider: spins while a peer is likely microseconds away,
/// then gives the core away (ranks often outnumber cores in tests).
class port final : public progress_port {
 public:
  void pause(std::uint64_t, int idle_rounds) override {
    if (idle_rounds <= 256) return;
    if (idle_rounds < 20000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
};

class endpoint {
  using clock = std::chrono::steady_clock;

 public:
  endpoint(const bootstrap::identity& id, std::shared_ptr<bootstrap::store> store, settings with)
      : rank_(id.rank), size_(id.size), store_(std::move(store)), settings_(std::move(with)) {
    if (size_ > wire::max_ranks)
      throw error(errc::invalid_argument, "transport::fabric: " + std::to_string(size_) + " ranks exceed the " +
                                              std::to_string(wire::max_ranks) + " a tag can name");
    try {
      open();
      exchange_addresses();
      exchange_windows();
      chunk_bytes_ = settings_.chunk_bytes ? settings_.chunk_bytes : chunk_for_provider(provider_);
      if (settings_.mailbox == 1 || (settings_.mailbox < 0 && provider_ == "shm"))
        mailboxes_ = std::make_unique<local_mailboxes>(rank_, size_, *store_, prefix_, settings_.startup_timeout);
      if (settings_.bulk == 1 || (settings_.bulk < 0 && provider_ == "shm"))
        bulk_ = std::make_unique<local_mailboxes>(rank_, size_, *store_, prefix_ + "bulk/", settings_.startup_timeout,
                                                  local_mailboxes::geometry{chunk_bytes_, settings_.bulk_slots});
      for (int k = 0; k < control_receives; ++k) post_control_receive(acquire(nullptr, 0));
      bootstrap::barrier(*store_, prefix_ + "ready", size_, settings_.startup_timeout);
    } catch (...) {
      close();
      throw;
    }
  }
  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;

  ~endpoint() {
    engine_.set_mode(progress_mode::caller);
    say_goodbye();
    close();
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The calls in flight on this endpoint, and who advances them.
  progress_engine& engine() { return engine_; }
  const std::string& provider() const { return provider_; }
  fid_ep* ep() const { return ep_; }
  fi_addr_t address(int peer) const { return peers_[std::size_t(peer)]; }
  registration_cache& registrations() { return *mr_; }
  /// The provider's text for a completion error (valid while it is being dispatched).
  std::string explain(const fi_cq_err_entry& e) const { return explain_completion(cq_, e, provider_); }

  /// About how much memory a call's recv_reduce staging slots take.
  std::size_t staging_bytes() const { return settings_.staging_bytes; }

  /// Sends up to this size are injected: buffered by the provider at once, no completion.
  std::size_t inject_bytes() const { return inject_bytes_; }

  /// Whether data messages carry the call's signature as remote CQ data.
  bool carries_signature() const { return carries_signature_; }

  /// The shared-memory mailboxes to ranks on this host, for small messages and for
  /// chunks (nullptr: none).
  local_mailboxes* mailboxes() { return mailboxes_.get(); }
  local_mailboxes* bulk_mailboxes() { return bulk_.get(); }

  /// The chunk the collectives cut large messages into (settings::chunk_bytes).
  std::size_t chunk_bytes() const { return chunk_bytes_; }

  /// The chunk that suits a provider, measured with allreduce_perf at 8-64 MiB
  /// (docs/performance.md): 1 MiB over rxm (tcp;ofi_rxm, verbs;ofi_rxm), where each
  /// message above 16 KiB costs a rendezvous round trip; 512 KiB over shm, fewer messages
  /// while a chunk still fits in cache; else schedule::default_chunk_bytes.
  static std::size_t chunk_for_provider(const std::string& provider) {
    if (provider.ends_with("ofi_rxm")) return std::size_t(1) << 20;
    if (provider == "shm") return std::size_t(512) << 10;
    return schedule::default_chunk_bytes;
  }

  // ---- one-sided calls over the RMA window ---------------------------------------

  /// The bytes of each window half that every rank has (0: one-sided steps must be
  /// lowered to messages).
  std::size_t window_half_bytes() const { return window_half_bytes_; }
  rma_window& window() { return *window_; }
  const window_announcement& peer_window(int peer) const { return peer_windows_[std::size_t(peer)]; }
  /// After any failure a late write of the failed call may still land in the window, so
  /// one-sided calls stop: the collectives lower them from then on.
  bool one_sided_usable() const { return window_half_bytes_ > 0 && failures_.empty(); }
  std::size_t one_sided_calls() const { return one_sided_calls_; }

  /// Starts a one-sided call: the previous one must end first (its half of the window is
  /// the one the next call uses). Returns the half this call uses.
  std::size_t begin_one_sided(call* owner) {
    while (one_sided_current_) one_sided_current_->finish();
    one_sided_current_ = owner;
    return one_sided_calls_++ & 1;
  }
  void end_one_sided(const call* owner) {
    if (one_sided_current_ == owner) one_sided_current_ = nullptr;
  }

  /// Hands every arrived flag of call `sequence` (mod 2^15) to `take`; drops flags of
  /// calls before it (their call failed or ended without them).
  template <class Take>
  void take_flags(std::uint32_t sequence, Take&& take) {
    std::size_t kept = 0;
    for (std::uint64_t data : flags_) {
      const wire::flag f = wire::read_flag(data);
      if (f.sequence == sequence)
        take(f);
      else if (!wire::earlier(f.sequence, sequence))
        flags_[kept++] = data;
    }
    flags_.resize(kept);
  }

  // ---- requests ------------------------------------------------------------------

  posted_op* acquire(call* owner, std::uint32_t step) {
    posted_op* r;
    if (free_.empty()) {
      all_.push_back(std::make_unique<posted_op>());
      r = all_.back().get();
    } else {
      r = free_.back();
      free_.pop_back();
    }
    r->ctx = {};
    r->owner = owner;
    r->step = step;
    r->what = posted_op::purpose::data;
    return r;
  }
  void release(posted_op* r) {
    r->owner = nullptr;
    free_.push_back(r);
  }
  /// A failed call's request still known to the provider: reclaimed on its completion.
  void orphan(posted_op* r) {
    r->owner = nullptr;
    ++orphans_;
  }
  std::size_t orphans() const { return orphans_; }

  // ---- workspaces ----------------------------------------------------------------

  std::unique_ptr<workspace> take_workspace() {
    ++calls_in_flight_;
    if (workspaces_.empty()) return std::make_unique<workspace>();
    auto w = std::move(workspaces_.back());
    workspaces_.pop_back();
    w->reduces.clear();
    w->free_slots.clear();
    w->polls.clear();
    return w;
  }
  void give_workspace(std::unique_ptr<workspace> w) {
    if (!w) return;
    workspaces_.push_back(std::move(w));
    // Registrations set aside while calls were in flight can go now.
    if (--calls_in_flight_ == 0 && orphans_ == 0) mr_->trim();
  }
  /// The executor's bookkeeping of a call, reused likewise (returned when the call is gone).
  std::unique_ptr<step_bookkeeping> take_bookkeeping() {
    if (books_.empty()) return nullptr;
    auto b = std::move(books_.back());
    books_.pop_back();
    return b;
  }
  void give_bookkeeping(std::unique_ptr<step_bookkeeping> b) {
    if (b) books_.push_back(std::move(b));
  }
  /// The workspace of a failed call whose orphans may still write its memory: kept until
  /// the endpoint closes, never reused.
  void retire_workspace(std::unique_ptr<workspace> w) {
    if (!w) return;
    retired_.push_back(std::move(w));
    --calls_in_flight_;
  }

  /// Drops the registrations over [data, data + bytes) (fabric::deregister). Those a call
  /// in flight or a failed call's request may still use are closed once none can.
  std::size_t forget_registrations(const void* data, std::size_t bytes) {
    return mr_->forget(data, bytes, calls_in_flight_ > 0 || orphans_ > 0);
  }

  // ---- progress ------------------------------------------------------------------

  /// Reads the completion queue once and dispatches what it found; true if anything did.
  bool progress() {
    if (!backlog_.empty() && retry_controls()) return true;
    fi_cq_tagged_entry entries[16];
    const ssize_t n = fi_cq_read(cq_, entries, 16);
    if (n > 0) {
      for (ssize_t k = 0; k < n; ++k) dispatch(entries[k]);
      return true;
    }
    if (n == -FI_EAGAIN) return false;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(cq_, &err, 0) < 0) return false;
      dispatch_error(err);
      return true;
    }
    check_fabric_call(n, "fi_cq_read", provider_, {rank_});
    return false;
  }

  // ---- failures and liveness -----------------------------------------------------

  /// The failure another rank (or this one) announced for call `sequence`, if any.
  const fabric::failure* failure(std::uint64_t sequence) const {
    if (failures_.empty()) return nullptr;  // the common case, checked every round
    auto it = failures_.find(sequence);
    return it == failures_.end() ? nullptr : &it->second;
  }
  bool any_failure() const { return !failures_.empty(); }

  /// Records the failure of call `sequence` and tells every other rank.
  void announce_failure(std::uint64_t sequence, errc code, const std::string& message) {
    failures_.emplace(sequence, fabric::failure{code, message});
    const auto now = clock::now();
    for (int peer = 0; peer < size_; ++peer)
      if (peer != rank_) send_abort(peer, sequence, code, message, now + control_patience);
    // Most callers leave soon after a failure: push the news out before returning to them.
    while (!backlog_.empty() && clock::now() < now + std::chrono::milliseconds(200))
      if (!progress()) std::this_thread::yield();
  }

  /// Tells one rank that call `sequence` failed; it passes the news on (relay).
  void send_abort(int peer, std::uint64_t sequence, errc code, const std::string& message, clock::time_point until) {
    send_control(peer, {wire::control_type::abort, code, rank_, sequence, message}, until);
  }

  /// Pings every other rank and waits up to `grace` for the answers; returns the ranks
  /// that did not answer (exited, killed, or stuck outside mimatrix).
  std::vector<int> silent_peers(std::chrono::milliseconds grace) {
    const std::uint64_t nonce = ++nonce_;
    const auto until = clock::now() + grace;
    for (int peer = 0; peer < size_; ++peer)
      if (peer != rank_) send_control(peer, {wire::control_type::ping, errc::aborted, rank_, nonce, {}}, until);
    auto answered = [&] {
      for (int peer = 0; peer < size_; ++peer)
        if (peer != rank_ && pongs_[std::size_t(peer)] < nonce) return false;
      return true;
    };
    while (!answered() && clock::now() < until)
      if (!progress()) std::this_thread::yield();
    std::vector<int> silent;
    for (int peer = 0; peer < size_; ++peer)
      if (peer != rank_ && pongs_[std::size_t(peer)] < nonce) silent.push_back(peer);
    return silent;
  }

 private:
  static constexpr int control_receives = 8;
  /// How long a control message the provider pushes back is retried.
  static constexpr std::chrono::milliseconds control_patience{2000};

  // ---- set-up --------------------------------------------------------------------

  static std::string available_providers() {
    fi_info* hints = fi_allocinfo();
    hints->caps = FI_TAGGED;
    hints->ep_attr->type = FI_EP_RDM;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    fi_info* list = nullptr;
    std::set<std::string> names;
    if (fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &list) == 0)
      for (fi_info* i = list; i; i = i->next) names.insert(i->fabric_attr->prov_name);
    fi_freeinfo(list);
    fi_freeinfo(hints);
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s.empty() ? "none" : s;
  }

  void open() {
    fi_info* hints = fi_allocinfo();
    if (!hints) throw error(errc::transport, "transport::fabric: fi_allocinfo failed");
    hints->caps = FI_TAGGED | (settings_.window_bytes ? FI_RMA | FI_WRITE | FI_REMOTE_WRITE : 0);
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    // The registration modes this endpoint knows how to honour.
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
    if (!settings_.provider.empty()) hints->fabric_attr->prov_name = strdup(settings_.provider.c_str());
    int ret = fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &info_);
    if ((ret != 0 || !info_) && settings_.window_bytes) {
      // A provider without RMA writes still runs everything as messages.
      hints->caps = FI_TAGGED;
      settings_.window_bytes = 0;
      ret = fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &info_);
    }
    fi_freeinfo(hints);
    if (ret != 0 || !info_) {
      const char* filter = std::getenv("FI_PROVIDER");
      throw error(errc::transport,
                  "rank " + std::to_string(rank_) + ": transport::fabric: libfabric offers no provider " +
                      (settings_.provider.empty() ? std::string("at all") : "named '" + settings_.provider + "'") +
                      " with reliable datagram endpoints and tagged messages (" +
                      explain_fabric_call("fi_getinfo", ret, "") + "); available: " + available_providers() +
                      (filter ? std::string("; FI_PROVIDER=") + filter + " filters the list" : ""));
    }
    provider_ = info_->fabric_attr->prov_name;
    const error_context where{rank_};
    check_fabric_call(fi_fabric(info_->fabric_attr, &fabric_, nullptr), "fi_fabric", provider_, where);
    check_fabric_call(fi_domain(fabric_, info_, &domain_, nullptr), "fi_domain", provider_, where);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.wait_obj = FI_WAIT_NONE;
    cq_attr.size = 4096;
    check_fabric_call(fi_cq_open(domain_, &cq_attr, &cq_, nullptr), "fi_cq_open", provider_, where);
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    av_attr.count = static_cast<std::size_t>(size_);
    check_fabric_call(fi_av_open(domain_, &av_attr, &av_, nullptr), "fi_av_open", provider_, where);
    if (provider_ == "shm") remove_stale_shm_regions();  // else a recycled pid fails in fi_enable
    check_fabric_call(fi_endpoint(domain_, info_, &ep_, nullptr), "fi_endpoint", provider_, where);
    check_fabric_call(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)", provider_, where);
    check_fabric_call(fi_ep_bind(ep_, &av_->fid, 0), "fi_ep_bind(av)", provider_, where);
    check_fabric_call(fi_enable(ep_), "fi_enable", provider_, where);
    const bool rma = (info_->caps & FI_RMA) && settings_.window_bytes && info_->domain_attr->cq_data_size >= 8;
    mr_ = std::make_unique<registration_cache>(
        domain_, provider_, settings_.register_always || (info_->domain_attr->mr_mode & FI_MR_LOCAL) != 0,
        FI_SEND | FI_RECV | (rma ? FI_WRITE : 0));
    if (rma)
      window_ = std::make_unique<rma_window>(domain_, provider_, rank_, settings_.window_bytes,
                                             (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0,
                                             (info_->domain_attr->mr_mode & FI_MR_PROV_KEY) != 0);
    carries_signature_ = info_->domain_attr->cq_data_size >= 8;
    inject_bytes_ = info_->tx_attr->inject_size;
    pongs_.assign(std::size_t(size_), 0);
  }

  void exchange_addresses() {
    static std::atomic<int> instances{0};  // every rank opens its endpoints in the same order
    prefix_ = "mimatrix/fabric/" + std::to_string(instances++) + "/";
    // Before anything is published: a second process started with this RANK fails here.
    bootstrap::claim_rank(*store_, prefix_ + "claim", rank_, settings_.startup_timeout);
    std::vector<std::byte> name(256);
    std::size_t len = name.size();
    int ret = fi_getname(&ep_->fid, name.data(), &len);
    if (ret == -FI_ETOOSMALL) {
      name.resize(len);
      ret = fi_getname(&ep_->fid, name.data(), &len);
    }
    check_fabric_call(ret, "fi_getname", provider_, {rank_});
    name.resize(len);
    // The provider travels with the address: ranks that picked different providers
    // would otherwise fail later with an unreadable address.
    const std::string tagged = provider_ + '\n';
    std::vector<std::byte> mine(tagged.size() + name.size());
    std::memcpy(mine.data(), tagged.data(), tagged.size());
    std::memcpy(mine.data() + tagged.size(), name.data(), name.size());
    const auto all = bootstrap::all_gather(*store_, prefix_ + "addr", rank_, size_, mine, settings_.startup_timeout);
    peers_.assign(std::size_t(size_), FI_ADDR_NOTAVAIL);
    for (int peer = 0; peer < size_; ++peer) {
      const auto& bytes = all[std::size_t(peer)];
      const auto* text = reinterpret_cast<const char*>(bytes.data());
      const auto* end = std::find(text, text + bytes.size(), '\n');
      const std::string theirs(text, end);
      if (theirs != provider_)
        throw error(errc::mismatch, "rank " + std::to_string(rank_) + ": transport::fabric: this rank uses provider '" +
                                        provider_ + "' but rank " + std::to_string(peer) + " uses '" + theirs +
                                        "'; set MIMATRIX_PROVIDER alike on every rank");
      const std::size_t skip = static_cast<std::size_t>(end - text) + 1;
      const int inserted = fi_av_insert(av_, bytes.data() + skip, 1, &peers_[std::size_t(peer)], 0, nullptr);
      if (inserted != 1)
        check_fabric_call(inserted < 0 ? inserted : -FI_EADDRNOTAVAIL, "fi_av_insert", provider_, {rank_, peer});
    }
  }

  /// Every rank learns every window's address and key; one-sided calls use the
  /// smallest half any rank has, so every rank decides alike which calls fit.
  void exchange_windows() {
    window_announcement mine = window_ ? window_->announcement() : window_announcement{};
    std::vector<std::byte> bytes(sizeof mine);
    std::memcpy(bytes.data(), &mine, sizeof mine);
    const auto all = bootstrap::all_gather(*store_, prefix_ + "window", rank_, size_, bytes, settings_.startup_timeout);
    peer_windows_.assign(std::size_t(size_), {});
    std::uint64_t smallest = window_ ? mine.half_bytes : 0;
    for (int peer = 0; peer < size_; ++peer) {
      const auto& b = all[std::size_t(peer)];
      if (b.size() != sizeof(window_announcement))
        throw error(errc::mismatch, "rank " + std::to_string(rank_) + ": transport::fabric: rank " +
                                        std::to_string(peer) + " sent a malformed window announcement");
      std::memcpy(&peer_windows_[std::size_t(peer)], b.data(), b.size());
      smallest = std::min<std::uint64_t>(smallest, peer_windows_[std::size_t(peer)].half_bytes);
    }
    window_half_bytes_ = static_cast<std::size_t>(smallest);
  }

  // ---- control messages ----------------------------------------------------------

  void post_control_receive(posted_op* r) {
    r->what = posted_op::purpose::control_recv;
    r->payload.resize(wire::control_message::capacity);
    ssize_t ret;
    while ((ret = fi_trecv(ep_, r->payload.data(), r->payload.size(), nullptr, FI_ADDR_UNSPEC,
                           wire::control_bit, wire::control_ignore, &r->ctx)) == -FI_EAGAIN)
      progress();
    check_fabric_call(ret, "fi_trecv(control)", provider_, {rank_});
  }

  /// Posts a control message, or keeps it for progress() to retry until `until` when the
  /// provider pushes back (tcp;ofi_rxm answers -FI_EAGAIN until a new connection is up,
  /// which can take longer than a caller should spin). A dead peer's message is dropped
  /// at `until`.
  void send_control(int peer, const wire::control_message& m, clock::time_point until) {
    posted_op* r = acquire(nullptr, 0);
    r->what = posted_op::purpose::control_send;
    r->payload.resize(wire::control_message::capacity);
    const std::size_t len = m.encode(r->payload.data());
    const ssize_t ret = post_control(r, peer, len);
    if (ret == -FI_EAGAIN)
      backlog_.push_back({r, peer, len, until});
    else if (ret != 0)
      release(r);  // the peer is unreachable; a liveness probe will say so
  }

  ssize_t post_control(posted_op* r, int peer, std::size_t len) {
    return fi_tsend(ep_, r->payload.data(), len, nullptr, peers_[std::size_t(peer)], wire::control_tag(rank_),
                    &r->ctx);
  }

  /// Retries the control messages the provider pushed back; true if any went out.
  bool retry_controls() {
    const auto now = clock::now();
    bool posted = false;
    std::size_t kept = 0;
    for (const queued_control& q : backlog_) {
      const ssize_t ret = post_control(q.request, q.peer, q.bytes);
      if (ret == -FI_EAGAIN && now < q.until) {
        backlog_[kept++] = q;
        continue;
      }
      if (ret == 0)
        posted = true;
      else
        release(q.request);
    }
    backlog_.resize(kept);
    return posted;
  }

  /// Passes a failure this rank just learned of to the others: the link from the rank
  /// that found it may be the broken one (a provider can drop a connection that carried
  /// an oversized message), and every rank must still hear of it.
  void relay(const wire::control_message& m) {
    const auto until = clock::now() + control_patience;
    for (int peer = 0; peer < size_; ++peer)
      if (peer != rank_ && peer != m.source) send_control(peer, m, until);
  }

  void on_control(const wire::control_message& m) {
    switch (m.type) {
      case wire::control_type::abort:
        if (failures_.emplace(m.value, fabric::failure{m.code, m.text}).second) relay(m);
        break;
      case wire::control_type::ping:
        if (m.source >= 0 && m.source < size_)
          send_control(m.source, {wire::control_type::pong, errc::aborted, rank_, m.value, {}},
                       clock::now() + control_patience);
        break;
      case wire::control_type::pong:
        if (m.source >= 0 && m.source < size_)
          pongs_[std::size_t(m.source)] = std::max(pongs_[std::size_t(m.source)], m.value);
        break;
    }
  }

  // ---- dispatch ------------------------------------------------------------------

  void dispatch(const fi_cq_tagged_entry& e) {
    if (e.flags & FI_REMOTE_WRITE) {  // a peer's one-sided write landed: its flag
      if (e.flags & FI_REMOTE_CQ_DATA) flags_.push_back(e.data);
      return;
    }
    auto* r = static_cast<posted_op*>(e.op_context);
    switch (r->what) {
      case posted_op::purpose::data:
        if (r->owner)
          r->owner->on_complete(*r, e);
        else
          reclaim(r);
        break;
      case posted_op::purpose::control_send:
        release(r);
        break;
      case posted_op::purpose::control_recv: {
        wire::control_message m;
        const bool ok = m.decode(r->payload.data(), e.len);
        if (closing_) return release(r);
        post_control_receive(r);  // repost first: the handler may send
        if (ok) on_control(m);
        break;
      }
    }
  }

  void dispatch_error(const fi_cq_err_entry& e) {
    auto* r = static_cast<posted_op*>(e.op_context);
    if (!r) return;
    switch (r->what) {
      case posted_op::purpose::data:
        if (r->owner)
          r->owner->on_error(*r, e);
        else
          reclaim(r);
        break;
      case posted_op::purpose::control_send:
        release(r);  // the peer is gone; a liveness probe will say so
        break;
      case posted_op::purpose::control_recv:
        if (closing_ || e.err == FI_ECANCELED)
          release(r);
        else
          post_control_receive(r);
        break;
    }
  }

  void reclaim(posted_op* r) {
    if (orphans_) --orphans_;
    release(r);
  }

  // ---- tear-down -----------------------------------------------------------------

  /// Waits for every rank before closing, progressing meanwhile, so that no rank closes
  /// while a peer still needs it to complete the last messages (rendezvous protocols
  /// finish a send only when the receiver answers). Bounded: after a failure briefly.
  void say_goodbye() noexcept {
    if (!ep_ || !store_ || size_ == 1) return;
    try {
      const auto limit = any_failure() ? std::chrono::milliseconds(1000) : settings_.startup_timeout;
      const auto until = clock::now() + limit;
      const std::string key = prefix_ + "goodbye";
      store_->add(key, 1);
      while (store_->add(key, 0) < size_ && clock::now() < until) {
        for (int k = 0; k < 64; ++k) progress();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      for (int k = 0; k < 64; ++k) progress();
    } catch (...) {
      // The store's host (rank 0) may close first once everyone arrived; nothing to do.
    }
  }

  void close() noexcept {
    closing_ = true;
    backlog_.clear();
    if (ep_) fi_close(&ep_->fid);
    mr_.reset();
    window_.reset();
    mailboxes_.reset();
    if (av_) fi_close(&av_->fid);
    if (cq_) fi_close(&cq_->fid);
    if (domain_) fi_close(&domain_->fid);
    if (fabric_) fi_close(&fabric_->fid);
    if (info_) fi_freeinfo(info_);
    ep_ = nullptr;
    av_ = nullptr;
    cq_ = nullptr;
    domain_ = nullptr;
    fabric_ = nullptr;
    info_ = nullptr;
  }

  int rank_, size_;
  std::shared_ptr<bootstrap::store> store_;
  settings settings_;
  std::string provider_, prefix_;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  std::unique_ptr<registration_cache> mr_;
  std::unique_ptr<rma_window> window_;
  std::unique_ptr<local_mailboxes> mailboxes_, bulk_;
  std::size_t chunk_bytes_ = 0;
  std::vector<window_announcement> peer_windows_;
  std::size_t window_half_bytes_ = 0;
  call* one_sided_current_ = nullptr;
  std::size_t one_sided_calls_ = 0;
  std::vector<std::uint64_t> flags_;  // remote CQ data of writes not yet taken by their call
  bool carries_signature_ = true;
  std::size_t inject_bytes_ = 0;
  bool closing_ = false;
  std::vector<fi_addr_t> peers_;
  std::vector<std::unique_ptr<posted_op>> all_;
  std::vector<posted_op*> free_;
  std::size_t orphans_ = 0;
  std::size_t calls_in_flight_ = 0;  // workspaces taken and not yet given back
  std::vector<std::unique_ptr<workspace>> workspaces_, retired_;
  std::vector<std::unique_ptr<step_bookkeeping>> books_;
  std::map<std::uint64_t, fabric::failure> failures_;
  struct queued_control {
    posted_op* request;
    int peer;
    std::size_t bytes;
    clock::time_point until;
  };
  std::vector<queued_control> backlog_;  // control messages the provider pushed back
  std::vector<std::uint64_t> pongs_;
  std::uint64_t nonce_ = 0;
  progress_engine engine_{std::make_unique<port>()};
};

}  // namespace mimatrix::transport::detail::fabric
