// The endpoint's control plane: aborts and their relay, liveness probes (ping, pong), the
// backlog of control messages the provider pushed back, and what a stuck provider call does.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/transport/fabric/endpoint.hpp"
#include "mimatrix/transport/fabric/error.hpp"
#include "mimatrix/transport/fabric/wire.hpp"

namespace mimatrix::transport::detail::fabric {

inline void endpoint::tell_failure(std::uint64_t sequence, errc code, const std::string& message) {
  failures_.emplace(sequence, fabric::failure{code, message});
  const auto until = clock::now() + control_patience;
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_) send_abort(peer, sequence, code, message, until);
}

inline void endpoint::announce_failure(std::uint64_t sequence, errc code, const std::string& message) {
  const auto now = clock::now();
  tell_failure(sequence, code, message);
  // Most callers leave soon after a failure: push the news out before returning to them.
  while (controls_pending() && clock::now() < now + std::chrono::milliseconds(200))
    if (!progress()) std::this_thread::yield();
}

inline void endpoint::disable(errc code, std::string why) {
  if (disabled_) return;  // the first cause stays: later calls' failures follow from it
  // Aborts and their relays go out first, sent and not only posted: the others must hear of
  // the failure (over tcp a peer otherwise saw only this rank's exit, as a lost peer).
  tell_peers_disabled(code, why);
  const auto until = clock::now() + std::chrono::milliseconds(200);
  while (ep_ && controls_pending() && clock::now() < until)
    if (!progress()) std::this_thread::yield();
  ep_ = nullptr;
  orphans_ = 0;  // nothing completes them now: the provider let go of them
  backlog_.clear();
  controls_out_ = 0;
  disabled_ = fabric::failure{code, std::move(why)};
  every_call_ = &*disabled_;
}

inline void endpoint::abort_all(const std::string& why) {
  if (aborted_ || disabled_) return;
  const std::string text = "rank " + std::to_string(rank_) + " aborted the communicator" + (why.empty() ? "" : ": " + why);
  aborted_ = fabric::failure{errc::aborted, text};
  every_call_ = &*aborted_;
  const auto now = clock::now();
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_) send_control(peer, {wire::control_type::shutdown, errc::aborted, rank_, 0, text}, now + control_patience);
  for (const auto& weak : parts_)  // their locks after this one's, never the other way
    if (const auto part = weak.lock()) {
      auto part_lock = part->engine().lock();
      part->abort_all(why);
    }
}

// Ranks that finished the call this rank failed would otherwise meet its closed endpoint
// only at their next call's deadline (found by a black-box test: a broadcast whose ranks
// disagreed on the root failed on one rank, and over tcp the others were never told).
inline void endpoint::tell_peers_disabled(errc code, const std::string& why) {
  if (!ep_ || disabled_ || aborted_) return;
  const auto until = clock::now() + control_patience;
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_) send_control(peer, {wire::control_type::shutdown, code, rank_, 0, why}, until);
}

inline std::vector<int> endpoint::silent_peers(std::chrono::milliseconds grace) {
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

inline void endpoint::post_control_receive(posted_op* r) {
  if (!ep_) return release(r);  // disable()d
  r->what = posted_op::purpose::control_recv;
  r->payload.resize(wire::control_message::capacity);
  ssize_t ret;
  const auto post = [&] {
    return fi_trecv(ep_, r->payload.data(), r->payload.size(), nullptr, FI_ADDR_UNSPEC, wire::control_tag, 0,
                    &r->ctx);
  };
  while ((ret = watched("fi_trecv", -1, post)) == -FI_EAGAIN)
    progress();
  check_fabric_call(ret, "fi_trecv(control)", provider_, {rank_});
}

inline void endpoint::send_control(int peer, const wire::control_message& m, clock::time_point until) {
  // A process killed or stopped inside the shm provider may hold its region's lock: a
  // send to it would spin until it runs again, if ever. It cannot answer anyway.
  if (unreachable(peer)) return;
  posted_op* r = acquire(nullptr, 0);
  r->what = posted_op::purpose::control_send;
  r->step = std::uint32_t(peer);
  r->until = until;
  r->payload.resize(wire::control_message::capacity);
  const std::size_t len = m.encode(r->payload.data());
  r->payload.resize(len);
  const ssize_t ret = post_control(r, peer, len);
  if (ret == 0)
    ++controls_out_;
  else if (ret == -FI_EAGAIN)
    backlog_.push_back({r, peer, len, until});
  else
    release(r);  // the peer is unreachable; a liveness probe will say so
}

// A message longer than its receive makes tcp;ofi_rxm drop that connection, and sends on
// it then fail with FI_ENOTCONN until a new one is made: the failure's news to that very
// peer (its abort, its shutdown) would be lost, and the peer would see only this rank's
// exit (issue 53 item 9). A send that failed so goes again, as one pushed back does.
inline void endpoint::control_send_failed(posted_op* r, int err) {
  const bool news = !r->payload.empty() && (r->payload[0] == std::byte(wire::control_type::abort) ||
                                            r->payload[0] == std::byte(wire::control_type::shutdown));
  if (err != FI_ENOTCONN || !news || clock::now() >= r->until || closing_) return sent_control(r);
  if (controls_out_ > 0) --controls_out_;
  backlog_.push_back({r, int(r->step), r->payload.size(), r->until});
}

inline bool endpoint::retry_controls() {
  const auto now = clock::now();
  bool posted = false;
  std::size_t kept = 0;
  for (const queued_control& q : backlog_) {
    const ssize_t ret = post_control(q.request, q.peer, q.bytes);
    if (ret == -FI_EAGAIN && now < q.until) {
      backlog_[kept++] = q;
      continue;
    }
    if (ret == 0) {
      posted = true;
      ++controls_out_;
    } else {
      release(q.request);
    }
  }
  backlog_.resize(kept);
  return posted;
}

inline std::string endpoint::behind(std::uint64_t sequence) const {
  std::string who;
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_ && nonce_ && pongs_[std::size_t(peer)] == nonce_ && peer_calls_[std::size_t(peer)] <= sequence)
      who += (who.empty() ? "" : ", ") + std::to_string(peer) + " at call #" +
             std::to_string(peer_calls_[std::size_t(peer)]);
  return who.empty() ? who
                     : "; rank(s) " + who + " answered a liveness probe but had not entered call #" +
                           std::to_string(sequence) + " (a progress thread answers for a rank busy elsewhere)";
}

inline void endpoint::relay(const wire::control_message& m) {
  const auto until = clock::now() + control_patience;
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_ && peer != m.source) send_control(peer, m, until);
}

inline void endpoint::on_control(const wire::control_message& m) {
  switch (m.type) {
    case wire::control_type::abort:
      if (failures_.emplace(m.value, fabric::failure{m.code, m.text}).second) relay(m);
      break;
    case wire::control_type::ping:
      if (m.source >= 0 && m.source < size_)
        send_control(m.source, {wire::control_type::pong, errc::aborted, rank_, m.value, std::to_string(calls_)},
                     clock::now() + control_patience);
      break;
    case wire::control_type::shutdown:
      take_shutdown(m);
      break;
    case wire::control_type::left:
      if (m.source >= 0 && m.source < size_ && (!left_ || m.value < left_->first))
        left_.emplace(m.value, fabric::failure{errc::aborted, m.text});
      break;
    case wire::control_type::which_call:
      on_which_call(m);
      break;
    case wire::control_type::pong:
      if (m.source >= 0 && m.source < size_) {
        if (m.value >= pongs_[std::size_t(m.source)])  // the pong carries the calls the peer entered
          peer_calls_[std::size_t(m.source)] = std::strtoull(m.text.c_str(), nullptr, 10);
        pongs_[std::size_t(m.source)] = std::max(pongs_[std::size_t(m.source)], m.value);
      }
      break;
  }
}

inline void endpoint::take_shutdown(const wire::control_message& m) {
  if (aborted_ || disabled_) return;
  // Calls here fail with the code of what closed the sender's endpoint (a lost peer, a
  // mismatch), or `aborted` after an abort: the origin's code on every rank.
  aborted_ = fabric::failure{m.code, m.text};
  every_call_ = &*aborted_;
  relay(m);
}

inline bool endpoint::unreachable(int peer) const {
  for (const auto& [rank, mark] : local_processes_)
    if (rank == peer) return mark.state() != process_status::running;
  return false;
}

inline std::vector<std::string> endpoint::local_peers(process_status state, const std::vector<int>* among) const {
  std::vector<std::string> found;
  for (const auto& [peer, mark] : local_processes_)
    if ((!among || std::find(among->begin(), among->end(), peer) != among->end()) && mark.state() == state)
      found.push_back("rank " + std::to_string(peer) + " (pid " + std::to_string(mark.pid) + ")");
  return found;
}

// A peer on another host cannot be seen from here; the store tells, once its connection
// ended without a word (lost/any, then lost/<r>: endpoint_setup.hpp). Asked only where some
// peer cannot be seen, by a thread of its own (lost_watch.hpp), at most every quarter second
// (stalled calls ask every 100 ms, and rank 0 serves every rank's asking), each time for
// 100 ms at most; never again once the store did not answer in time (a stopped rank 0: the
// liveness probe names it).
inline std::string endpoint::ended_peers() const {
  std::string gone = joined(local_peers(process_status::ended));
  if (!gone.empty()) gone += " exited or was killed (no such process on this host now)";
  const bool unseen = local_processes_.size() + 1 < std::size_t(size_);
  if (!unseen || !store_ || prefix_.empty()) return gone;
  // Not under the engine's lock: a caller's blocking get on the store would hold it up.
  if (!lost_) lost_ = std::make_unique<lost_watch>(store_, prefix_, rank_, size_);
  // A peer named above is not named again in the store's words (a survivor on its host read
  // both, one after the other).
  const auto ended_here = [&](int peer) {
    for (const auto& [rank, mark] : local_processes_)
      if (rank == peer) return mark.state() == process_status::ended;
    return false;
  };
  for (const auto& [peer, why] : lost_->look())
    if (!ended_here(peer)) gone += (gone.empty() ? "rank " : "; rank ") + std::to_string(peer) + " " + why;
  return gone;
}

inline void endpoint::ask_which_call(int peer, std::uint64_t sequence, std::uint64_t packed, std::uint64_t agreement) {
  if (peer < 0 || peer >= size_ || peer == rank_) return;
  send_control(peer,
               {wire::control_type::which_call, errc::mismatch, rank_, sequence,
                std::to_string(packed) + ' ' + std::to_string(agreement)},
               clock::now() + control_patience);
}

// A peer's stalled call asks which call this rank runs as its sequence. Ranks that run
// different collectives (or shapes) as one call may never meet a message of the other's:
// each waits for a receive the other never posts, and both would only time out (found by
// a black-box test: a broadcast beside an allreduce of one count). A rank that ran another
// one fails the call on every rank with `mismatch`, naming both; one that has not reached
// it yet says nothing, and asks in turn when it stalls there. The agreement is compared
// whole: a broadcast's packing carries its root, not the topology's digest, so ranks on two
// ring orders met no message that told.
inline void endpoint::on_which_call(const wire::control_message& m) {
  const call_record* mine = records_.find(m.value);
  if (!mine || m.source < 0 || m.source >= size_ || failures_.count(m.value)) return;
  char* rest = nullptr;
  const std::uint64_t theirs = std::strtoull(m.text.c_str(), &rest, 10);
  const std::uint64_t their_agreement = std::strtoull(rest, nullptr, 10);
  if (theirs == mine->packed && their_agreement == mine->agreement) return;
  const std::string what =
      theirs != mine->packed
          ? wire::disagreement(m.source, theirs, mine->packed, mine->sig, mine->algorithm, mine->agreement)
          : wire::built_differently(m.source, mine->sig, mine->algorithm);
  const std::string why = "rank " + std::to_string(rank_) + ": " + what +
                          " (found when rank " + std::to_string(m.source) + "'s call waited: no message of "
                          "one call met the other's)";
  tell_failure(m.value, errc::mismatch, why);  // not announce_failure: no progress from inside progress
}

inline void endpoint::on_stuck(const char* call, int peer, std::chrono::milliseconds inside) const noexcept {
  report_stuck(rank_, provider_, call, peer, inside, local_processes_, settings_.exit_when_stuck);
}

}  // namespace mimatrix::transport::detail::fabric
