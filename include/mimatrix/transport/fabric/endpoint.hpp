// One rank's libfabric endpoint: provider selection, the reliable-datagram endpoint with
// its completion queue and address vector, the address exchange through the rendezvous
// store, and the progress engine that hands completions to the calls they belong to.
// This file declares it, with its small members; the larger ones are defined by idea in endpoint_setup.hpp
// (wire-up), endpoint_control.hpp, endpoint_dispatch.hpp and endpoint_teardown.hpp, included at the end.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "mimatrix/bootstrap/detail/process_mark.hpp"
#include "mimatrix/bootstrap/env.hpp"
#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/device/port.hpp"
#include "mimatrix/schedule/policy.hpp"
#include "mimatrix/transport/fabric/call.hpp"
#include "mimatrix/transport/fabric/call_records.hpp"
#include "mimatrix/transport/fabric/error.hpp"
#include "mimatrix/transport/fabric/lost_watch.hpp"
#include "mimatrix/transport/fabric/mailbox.hpp"
#include "mimatrix/transport/fabric/progress_port.hpp"
#include "mimatrix/transport/fabric/provider_watch.hpp"
#include "mimatrix/transport/fabric/registration_cache.hpp"
#include "mimatrix/transport/fabric/window.hpp"
#include "mimatrix/transport/fabric/wire.hpp"
#include "mimatrix/transport/progress.hpp"
#include "mimatrix/transport/shared_fate.hpp"
#include "mimatrix/transport/step_executor.hpp"

namespace mimatrix::transport::detail::fabric {

using process_status = bootstrap::detail::process_mark::status;

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
  bool exit_when_stuck = true;  // a provider call that never returns ends the process
  std::string group = "world";  // keys the store entries with the count of its endpoints opened here
};

class endpoint {
  using clock = std::chrono::steady_clock;

 public:
  // Opens and wires up (endpoint_setup.hpp); closes after the other ranks (endpoint_teardown.hpp).
  endpoint(const bootstrap::identity& id, std::shared_ptr<bootstrap::store> store, settings with);
  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;

  ~endpoint();

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The calls in flight on this endpoint, and who advances them.
  progress_engine& engine() { return engine_; }
  const std::string& provider() const { return provider_; }
  const std::shared_ptr<bootstrap::store>& store() const { return store_; }
  /// What this group's calls share with other groups' (fabric::share_fate; null: none).
  /// Set before any call starts.
  std::shared_ptr<shared_fate>& fate() { return fate_; }
  /// Groups split from this one that run parts of its calls: abort_all() aborts them too.
  void abort_with(std::weak_ptr<endpoint> part) { parts_.push_back(std::move(part)); }
  const bootstrap::identity& identity() const { return identity_; }
  std::string group_instance() const { return prefix_.substr(16, prefix_.size() - 17); }  // "world/0"

  /// A rank's part of a split: its identity in the new group, and the group's name.
  struct split_part {
    bootstrap::identity id;
    std::string group;
  };
  /// Collective over the group (endpoint_setup.hpp): none for a negative color.
  std::optional<split_part> split(int color, int key);
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

  /// Whether calls on device buffers may read peers' device memory directly, where the
  /// port can share it and every peer is on this host (MIMATRIX_DEVICE_IPC, default on;
  /// 0 stages through host memory). Agreed at start-up: both ends must move alike.
  static bool device_ipc() {
    static const bool on = [] {
      const char* v = std::getenv("MIMATRIX_DEVICE_IPC");
      return !v || (std::string_view(v) != "0" && std::string_view(v) != "off");
    }();
    return on;
  }

  /// Whether the provider sends and receives device buffers directly (FI_HMEM: GPUDirect
  /// RDMA on verbs or efa), where no mailbox carries them: MIMATRIX_DEVICE_HMEM is "auto"
  /// (unset: every provider but shm, whose ranks share a host and read each other's memory
  /// by IPC), "on" (shm too) or "0" (never: staged through host memory). Agreed at start-up.
  static std::string_view device_hmem() {
    static const std::string value = [] {
      const char* v = std::getenv("MIMATRIX_DEVICE_HMEM");
      return std::string(v ? v : "auto");
    }();
    return value;
  }

  /// Whether the provider moves device memory itself (FI_HMEM granted at open()).
  bool moves_device_memory() const { return hmem_; }

  /// Whether calls on `port`'s device memory may read every peer's memory directly: the
  /// port shares memory, MIMATRIX_DEVICE_IPC allows it, and every peer is on this host
  /// with a mailbox that carries `message_bytes`. Every rank answers alike.
  bool reaches_peers_device_memory(const device::port& port, std::size_t message_bytes) const {
    if (!port.shares_memory() || !device_ipc() || !mailboxes_ || mailboxes_->payload_bytes() < message_bytes)
      return false;
    for (int peer = 0; peer < size_; ++peer)
      if (peer != rank_ && !mailboxes_->reaches(peer)) return false;
    return true;
  }

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
  void sent_control(posted_op* r) {
    if (controls_out_ > 0) --controls_out_;  // 0 after disable(), which forgot them
    release(r);
  }
  void control_send_failed(posted_op* r, int err);  // endpoint_control.hpp
  /// A failed call's request still known to the provider: reclaimed on its completion.
  void orphan(posted_op* r) {
    r->owner = nullptr;
    ++orphans_;
  }
  std::size_t orphans() const { return orphans_; }

  /// A failed call left transfers the provider could not cancel, into memory its caller gets
  /// back or the next call would reuse, or (not over shm) failed with a mismatch, after which the
  /// provider may have dropped connections. The endpoint stops calling libfabric (nothing more
  /// lands) but leaves it open to the process's exit (tcp;ofi_rxm can crash closing an endpoint
  /// with a transfer in flight). Every call then fails at once with `code`, naming `why`.
  void disable(errc code, std::string why);  // endpoint_control.hpp
  const fabric::failure* disabled() const { return disabled_ ? &*disabled_ : nullptr; }
  /// A call lost a peer: so does every call in flight and later (a stopped rank, not dead
  /// to ended_peers(), held each call in flight a timeout more: a black-box test).
  void lose_peer(fabric::failure f) { if (!every_call_) every_call_ = &*(peer_lost_ = std::move(f)); }

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

  // ---- progress (endpoint_dispatch.hpp) ------------------------------------------

  /// Reads the completion queue once and dispatches what it found; true if anything did.
  bool progress();

  /// Runs one provider call, named `what`, to or from `peer` (-1: none), under the
  /// watchdog (provider_watch.hpp).
  template <class F>
  decltype(auto) watched(const char* what, int peer, F&& f) {
    if (!watch_) return std::forward<F>(f)();
    return watch_->call(what, peer, std::forward<F>(f));
  }
  /// A call with this deadline starts: its provider calls may take as long, and a grace.
  void allow(std::chrono::milliseconds deadline) {
    if (watch_) watch_->allow_call(deadline);
  }

  // ---- failures and liveness (the larger members: endpoint_control.hpp) ----------

  /// The failure another rank (or this one) announced for call `sequence`, if any.
  const fabric::failure* failure(std::uint64_t sequence) const {
    // The call's own failure first: a rank that closes its endpoint after it tells so too.
    if (auto it = failures_.find(sequence); it != failures_.end()) return &it->second;
    if (every_call_) return every_call_;  // disabled or aborted: every call, in flight or not
    if (left_ && sequence >= left_->first) return &left_->second;  // a peer closed before it
    return nullptr;
  }
  bool any_failure() const { return !failures_.empty(); }
  bool failed(std::uint64_t sequence) const { return failures_.count(sequence) != 0; }  // here or told so
  /// The failure of the latest call that failed, here or on another rank; null if none.
  const fabric::failure* latest_failure() const { return failures_.empty() ? nullptr : &failures_.rbegin()->second; }
  /// This rank runs (or refused) call `sequence`; a rank that closes tells how many it ran.
  void entered(std::uint64_t sequence) { calls_ = std::max(calls_, sequence + 1); }
  /// This rank runs `sig`, packed as `packed`: a peer that asks about it is answered from it.
  void runs(const signature& sig, std::uint64_t packed, const schedule::schedule& p) {
    records_.add(sig, packed, p.algorithm, p.agreement); }
  /// Asks `peer` which call it runs as call `sequence` (this rank's packed as `packed`); if
  /// another, it fails the call on every rank with `mismatch` (endpoint_control.hpp).
  void ask_which_call(int peer, std::uint64_t sequence, std::uint64_t packed, std::uint64_t agreement);

  /// The communicator was aborted, here or on another rank (abort_all); null if not.
  const fabric::failure* aborted() const { return aborted_ ? &*aborted_ : nullptr; }
  /// Ends every call in flight and every later one, on every rank, with `aborted` (as ncclCommAbort),
  /// with the engine locked, from any thread; what the provider pushed back stays queued (controls_pending()).
  void abort_all(const std::string& why);
  /// Control messages pushed back, or posted and not completed (tcp moves them only as we progress).
  bool controls_pending() const { return !backlog_.empty() || controls_out_ > 0; }

  /// Records the failure of call `sequence` and tells every other rank (announce: and pushes it out).
  void tell_failure(std::uint64_t sequence, errc code, const std::string& message);
  void announce_failure(std::uint64_t sequence, errc code, const std::string& message);

  /// Tells one rank that call `sequence`, which this rank took part in, failed; it passes the news on.
  void send_abort(int peer, std::uint64_t sequence, errc code, const std::string& message, clock::time_point until) {
    entered(sequence);  // a later goodbye's `left` must not cover it
    send_control(peer, {wire::control_type::abort, code, rank_, sequence, message}, until);
  }

  /// Pings every rank, waits up to `grace`; returns those silent (exited, killed, stuck).
  std::vector<int> silent_peers(std::chrono::milliseconds grace);
  void tell_peers_disabled(errc code, const std::string& why);  // so that their later calls fail too
  /// Peers that answered the last probe but had not entered call `sequence` ("" if none).
  std::string behind(std::uint64_t sequence) const;

  /// Whether `peer` runs on this host and its process has ended or is stopped: libfabric shm
  /// (1.17) spins on a lock of the receiver's region, which a process stopped there keeps.
  bool unreachable(int peer) const;
  /// The peers on this host (of `among`, if given) whose processes are in `state`, each as
  /// "rank 2 (pid 4242)": read from /proc, no answer from them needed.
  std::vector<std::string> local_peers(process_status state, const std::vector<int>* among = nullptr) const;
  /// The peers known gone and how: "rank 2 (pid 4242) exited or was killed (...)", or the store's lost/<r>.
  std::string ended_peers() const;

 private:
  static constexpr int control_receives = 8;
  /// How long a control message the provider pushes back is retried.
  static constexpr std::chrono::milliseconds control_patience{2000};
  // After a failure the goodbye waits no longer: a rank that does not come is gone or frozen.
  static constexpr std::chrono::milliseconds goodbye_after_failure{500};
  /// Tells, from the watchdog's thread, which peer keeps a provider call from returning;
  /// then ends the process unless settings say wait.
  void on_stuck(const char* call, int peer, std::chrono::milliseconds inside) const noexcept;

  // ---- set-up (endpoint_setup.hpp) -----------------------------------------------

  static std::string available_providers();
  void open();
  void ask_for_device_memory(fi_info* hints);
  void exchange_addresses();
  /// What every rank must set alike (both ends pick a message's route by it, and the
  /// schedules cut chunks by it), as "NAME=value" words.
  std::string agreed_settings() const;
  static std::string algorithm_rules();
  /// Throws `mismatch` naming the first setting `peer` has otherwise.
  void check_agreement(const std::string& mine, const std::string& theirs, int peer) const;
  /// Every rank learns every window's address and key; one-sided calls use the
  /// smallest half any rank has, so every rank decides alike which calls fit.
  void exchange_windows();

  // ---- control messages (endpoint_control.hpp) -----------------------------------

  void post_control_receive(posted_op* r);
  /// Posts a control message, or keeps it for progress() to retry until `until` (then
  /// dropped: a dead peer's) when the provider pushes back: tcp;ofi_rxm answers -FI_EAGAIN
  /// until a new connection is up, which can take longer than a caller should spin.
  void send_control(int peer, const wire::control_message& m, clock::time_point until);

  ssize_t post_control(posted_op* r, int peer, std::size_t len) {
    if (!ep_) return -FI_ENOTCONN;  // disable()d: the message is dropped
    return watched("fi_tsend", peer, [&] {
      return fi_tsend(ep_, r->payload.data(), len, nullptr, peers_[std::size_t(peer)], wire::control_tag,
                      &r->ctx);
    });
  }

  /// Retries the control messages the provider pushed back; true if any went out.
  bool retry_controls();
  /// Passes a failure this rank just learned of to the others: the link from the rank
  /// that found it may be the broken one (a provider can drop a connection that carried
  /// an oversized message), and every rank must still hear of it.
  void relay(const wire::control_message& m);
  void on_control(const wire::control_message& m);
  void on_which_call(const wire::control_message& m);
  void take_shutdown(const wire::control_message& m);  // every call fails as it says

  // ---- dispatch (endpoint_dispatch.hpp) ------------------------------------------

  void dispatch(const fi_cq_tagged_entry& e);
  void dispatch_error(const fi_cq_err_entry& e);

  void reclaim(posted_op* r) {
    if (orphans_) --orphans_;
    release(r);
  }

  // ---- tear-down (endpoint_teardown.hpp) -----------------------------------------

  /// Waits for every rank before closing, progressing meanwhile: a rendezvous send ends only
  /// when its receiver answers. Bounded: after a failure briefly.
  void say_goodbye() noexcept;
  void close() noexcept;

  int rank_, size_;
  std::shared_ptr<bootstrap::store> store_;
  settings settings_;
  std::string provider_, prefix_;
  bootstrap::identity identity_;
  int splits_ = 0;  // split() calls so far: every rank makes them in the same order
  mutable std::unique_ptr<lost_watch> lost_;  // peers on other hosts gone without a word
  std::shared_ptr<shared_fate> fate_;
  std::vector<std::weak_ptr<endpoint>> parts_;  // abort_with()
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
  bool hmem_ = false;  // FI_HMEM granted: device buffers go to the provider as they are
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
  call_records records_;  // this rank's latest calls, for peers that ask (runs())
  std::optional<fabric::failure> aborted_;   // abort_all(), here or on another rank
  const fabric::failure* every_call_ = nullptr;  // disabled_, aborted_ or peer_lost_, once one is
  std::uint64_t calls_ = 0;  // calls this rank ran (entered())
  std::optional<std::pair<std::uint64_t, fabric::failure>> left_;  // the first call a closed peer never joins
  std::optional<fabric::failure> disabled_;  // disable(): the libfabric endpoint is closed
  std::optional<fabric::failure> peer_lost_;  // lose_peer()
  struct queued_control { posted_op* request; int peer; std::size_t bytes; clock::time_point until; };
  std::vector<queued_control> backlog_;  // control messages the provider pushed back
  std::size_t controls_out_ = 0;  // control sends posted, not yet completed
  std::vector<std::uint64_t> pongs_;
  std::vector<std::uint64_t> peer_calls_;  // by rank: the calls it had entered, as its last pong said
  std::vector<std::pair<int, bootstrap::detail::process_mark>> local_processes_;  // peers on this host
  std::uint64_t nonce_ = 0;
  progress_engine engine_{std::make_unique<port>([this] { (void)progress(); })};
  std::unique_ptr<provider_watch> watch_;  // last: it watches the destructor's provider calls too
};

}  // namespace mimatrix::transport::detail::fabric

// The members defined out of the class, by idea.
#include "mimatrix/transport/fabric/endpoint_control.hpp"
#include "mimatrix/transport/fabric/endpoint_dispatch.hpp"
#include "mimatrix/transport/fabric/endpoint_setup.hpp"
#include "mimatrix/transport/fabric/endpoint_teardown.hpp"
