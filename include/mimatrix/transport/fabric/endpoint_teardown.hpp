// The endpoint's tear-down: ranks meet in the store before closing (bounded after a
// failure), then every libfabric object is closed in order.
#pragma once

#include <rdma/fabric.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "mimatrix/transport/fabric/endpoint.hpp"
#include "mimatrix/transport/fabric/library.hpp"

namespace mimatrix::transport::detail::fabric {

inline endpoint::~endpoint() {
  engine_.set_mode(progress_mode::caller);
  say_goodbye();
  close();
}

inline void endpoint::say_goodbye() noexcept {
  // A disable()d endpoint (no ep_) still counts itself in: its peers would wait for it
  // until their limit (seen: a broadcast's root, 60 s after its peer's mismatch over tcp).
  if (!store_) return;
  try {
    // Every store request is bounded by what is left: a frozen rank 0 (its store's host)
    // must not hold the others past the limit.
    // What the lost-peer watch read, if a stalled call started one: starting it here would
    // cost a thread and a store read at every end (the loop below reads lost/any itself).
    const bool failed = any_failure() || aborted_ || !local_peers(process_status::ended).empty() ||
                        (lost_ && !lost_->look().empty());
    const auto limit = failed ? goodbye_after_failure : settings_.startup_timeout;
    const auto until = clock::now() + limit;
    const auto left = [&] {
      return std::max(std::chrono::ceil<std::chrono::milliseconds>(until - clock::now()), std::chrono::milliseconds(1));
    };
    // Peers still in a call this rank never joins (an exception unwound its communicator)
    // would wait for it to their deadline, blaming another rank, while it waits here. (After
    // a failure they know already.)
    if (ep_ && size_ > 1 && !failed) {
      const std::string text = "rank " + std::to_string(rank_) + " closed its communicator after " +
                               std::to_string(calls_) + " call(s): it joins no call from #" + std::to_string(calls_) +
                               " on (an exception or an early return on that rank?)";
      for (int peer = 0; peer < size_; ++peer)
        if (peer != rank_) send_control(peer, {wire::control_type::left, errc::aborted, rank_, calls_, text}, until);
    }
    for (const std::string& lost : {"lost/" + std::to_string(rank_), std::string("lost/any")})
      store_->cancel_when_gone(prefix_ + lost, left());  // leaving with a word
    const std::string key = prefix_ + "goodbye";
    std::int64_t here = size_ == 1 ? 1 : store_->add_within(key, 1, left());
    // A peer on another host that went without a word (lost/any) never comes.
    const bool unseen = local_processes_.size() + 1 < std::size_t(size_);
    for (auto look = clock::now(); here < size_ && clock::now() < until;) {
      for (int k = 0; k < 64; ++k) progress();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      here = store_->add_within(key, 0, left());
      if (unseen && !failed && clock::now() >= look) {
        look = clock::now() + std::chrono::milliseconds(250);
        if (store_->add_within(prefix_ + "lost/any", 0, left()) != 0) break;
      }
    }
    for (int k = 0; k < 64; ++k) progress();
    // The last rank through erases the group's keys (a few hundred bytes a rank), so that a
    // job remaking communicators does not fill its store. Before, a rank still counting
    // goodbyes would lose its counter. After a failure they stay: not every rank comes.
    if (here >= size_ && (size_ == 1 || store_->add_within(prefix_ + "gone", 1, left()) == size_))
      store_->erase_prefix(prefix_);
  } catch (...) {
    // The store's host (rank 0) may close first once everyone arrived, or be frozen.
  }
}

inline void endpoint::close() noexcept {
  closing_ = true;
  backlog_.clear();
  // tcp;ofi_rxm can crash closing an endpoint with a transfer to a failed peer still in
  // flight inside it, which no call of ours need know of (seen: SIGSEGV in fi_close of the
  // endpoint after a call's deadline passed with a peer stopped; psm's handler then ended
  // the rank before it printed its error). So after a failure, as after disable(), the
  // endpoint and what it stands on stay open, left to the process's exit; shm closes fine.
  if (disabled_ || (provider_ != "shm" && (any_failure() || aborted_))) {
    mr_.reset();
    window_.reset();
    mailboxes_.reset();
    return;
  }
  if (ep_) watched("fi_close(endpoint)", -1, [&] { return fi_close(&ep_->fid); });
  mr_.reset();
  window_.reset();
  mailboxes_.reset();
  if (av_) fi_close(&av_->fid);
  if (cq_) fi_close(&cq_->fid);
  if (domain_) fi_close(&domain_->fid);
  if (fabric_) fi_close(&fabric_->fid);
  if (info_) libfabric().freeinfo(info_);  // info_ exists: libfabric is loaded
  ep_ = nullptr;
  av_ = nullptr;
  cq_ = nullptr;
  domain_ = nullptr;
  fabric_ = nullptr;
  info_ = nullptr;
}

}  // namespace mimatrix::transport::detail::fabric
