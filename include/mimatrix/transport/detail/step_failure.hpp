// The step executor's failure paths, deadline and the diagnosis of a stuck call: which
// step waits for what, from whom. Definitions of step_executor members, apart from its
// state machine (step_executor.hpp includes this file last).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/p2p.hpp"
#include "mimatrix/transport/step_executor.hpp"

namespace mimatrix::transport {

/// How often a stuck call asks whether a peer's process has ended: a killed peer on this
/// host is named within about twice this.
inline constexpr std::chrono::milliseconds ended_check_interval{100};

/// How long a liveness probe waits for answers: an eighth of the call's timeout, between
/// 50 ms and 1 s.
inline std::chrono::milliseconds probe_grace(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 8, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
}

/// "a, b, c": peers' descriptions in a message.
inline std::string joined(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : ", ") + p;
  return s;
}

inline void step_executor::fail(errc code, std::string message, std::string origin) {
  if (finished()) return;
  end_with(code, std::move(message), std::move(origin));
  if (fate_) fate_->mark(code, this->message());
  settle_device_after_failure();
  on_failure(code, true);
}

inline void step_executor::abandon(errc code, std::string message, std::string origin) {
  if (finished()) return;
  end_with(code, std::move(message), std::move(origin));
  if (fate_) fate_->mark(code, this->message());
  settle_device_after_failure();
  on_failure(code, false);
}

/// Whether a failure's words begin with this rank ("rank 2, ...", "rank 2's ...": origins
/// all name their rank first).
inline bool names_rank(std::string_view origin, int rank) {
  const std::string self = "rank " + std::to_string(rank);
  return origin.starts_with(self) && origin.size() > self.size() &&
         std::string_view(",:' ").find(origin[self.size()]) != std::string_view::npos;
}

inline void step_executor::fail_from(errc code, const std::string& origin) {
  if (finished()) return;
  // Quoting the origin, not the message of each rank or call that passed it on, keeps the
  // cause in front (it nested four deep after a rank killed across hosts: a black-box test).
  note_stall();  // where this rank was when another's failure ended the call
  const bool own = names_rank(origin, plan_->rank);
  end_with(code,
           "rank " + std::to_string(plan_->rank) + ": " + to_string(sig_) +
               (own ? " failed after an earlier failure on this rank: " : " failed on another rank: ") + origin,
           origin);
  if (fate_) fate_->mark(code, this->message());
  settle_device_after_failure();
  on_failure(code, false);
}

inline bool step_executor::device_failed(const error& e) {
  fail(e.code() == errc::cuda ? errc::cuda : errc::transport, describe(stuck_context(), e.what()));
  return false;
}

// Never waits for the call's device work: it may wait behind an earlier call's gate on
// the caller's stream, which this thread (the progress thread, often) has to open. The
// gates open behind that work; what it uses is kept until the call is let go of.
inline void step_executor::settle_device_after_failure() {
  try {
    if (staging_) staging_->abandon();
    if (device_) device_->finish();
  } catch (const error&) {  // the device failed: the streams' gates cannot be queued
  }
}

/// The deadline counts from the call's first idle round, not its start: most small calls
/// never wait, and reading the clock costs.
inline void step_executor::check_time() {
  const auto now = clock::now();
  if (!book_->clock.started) {
    book_->clock.started = true;
    book_->clock.deadline = now + timeout_;
    // Probe peers' liveness a little before the deadline, so a lost rank is named within it.
    book_->clock.probe_at = book_->clock.deadline - 2 * probe_grace(timeout_);
    book_->clock.ended_check_at = now + ended_check_interval;
  }
  // A concluded call is done with its peers: only its output's way back can keep it. So
  // is one whose steps are all done with only its own stream work left (its reads of
  // peers' memory among it: their senders wait for this rank's word after them). A peer
  // that ends or falls silent then fails nothing; the deadline still bounds the wait.
  const bool peers_matter = !concluded_ && !device_work_only();
  if (now >= book_->clock.ended_check_at && peers_matter) {
    book_->clock.ended_check_at = now + ended_check_interval;
    note_stall();  // a call stuck this long is worth a note; shorter waits are not
    if (const std::string gone = ended_peers(); !gone.empty()) {
      while (advance()) {  // what it sent before it exited may still be queued
      }
      if (finished()) return;
      note_stall();
      return fail(errc::peer_lost, describe(stuck_context(), gone + "; this rank was " + stuck_reason()));
    }
  }
  if (probes() && peers_matter && !book_->clock.probed && now >= book_->clock.probe_at) {
    book_->clock.probed = true;
    const std::vector<int> silent = silent_peers(probe_grace(timeout_));
    while (advance()) {  // the probe progressed the transport: the call may be done
    }
    if (finished()) return;
    // Silent peers whose processes run on this host are alive, only busy outside mimatrix
    // (a caller-driven rank in a long step): they may still come, so the call waits for its
    // deadline and then times out. Any other silence is a loss, named now.
    if (!silent.empty()) {
      if (const auto running = running_peers(silent); running.size() == silent.size()) {
        book_->clock.silent_but_running = joined(running);
      } else {
        std::string who;
        for (int r : silent) who += (who.empty() ? "" : ", ") + std::to_string(r);
        note_stall();
        return fail(errc::peer_lost,
                    describe(stuck_context(), "rank(s) " + who +
                                                  " did not answer a liveness probe (exited, killed, or stuck "
                                                  "outside mimatrix) while " + stuck_reason()));
      }
    }
  }
  if (clock::now() >= book_->clock.deadline) {
    note_stall();
    const std::string& running = book_->clock.silent_but_running;
    fail(errc::timeout,
         describe(stuck_context(), "timed out after " + std::to_string(timeout_.count()) + " ms " + stuck_reason() +
                                       (running.empty() ? std::string()
                                                        : "; " + running + " runs on this host but did not answer a "
                                                          "liveness probe: it is busy outside mimatrix (a rank in a "
                                                          "long step answers with MIMATRIX_PROGRESS=thread)")));
  }
}

inline std::int64_t step_executor::stuck_step() const {
  const auto& steps = book_->steps;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto kind = plan_->steps[i].kind;
    const bool receives = kind == schedule::step_kind::recv || kind == schedule::step_kind::recv_reduce ||
                          kind == schedule::step_kind::wait;
    if (receives && steps[i].ready && !steps[i].done) return std::int64_t(i);
  }
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (steps[i].posted || steps[i].queued) return std::int64_t(i);
  return -1;
}

inline void step_executor::note_stall() const {
  stall_note* note = stall_note_.load(std::memory_order_acquire);
  if (!note) return;
  const std::int64_t at = stuck_step();
  if (at < 0) return;
  const schedule::step& st = step_at(static_cast<schedule::step_id>(at));
  note->note(at, st.peer, st.tag, st.bytes(), st.kind);
}

inline error_context step_executor::context(schedule::step_id id) const {
  const schedule::step& st = step_at(id);
  return {plan_->rank, st.peer, schedule::call_name(sig_), static_cast<std::int64_t>(sig_.sequence),
          static_cast<std::int64_t>(id), static_cast<std::int64_t>(st.bytes())};
}

inline error_context step_executor::stuck_context() const {
  if (const std::int64_t id = stuck_step(); id >= 0) return context(static_cast<schedule::step_id>(id));
  return {plan_->rank, -1, schedule::call_name(sig_), static_cast<std::int64_t>(sig_.sequence)};
}

inline std::string step_executor::stuck_reason() const {
  std::string why;
  const std::int64_t at = stuck_step();
  if (at < 0) {
    why = concluded_ ? "with every step done, waiting for its output's way back to the device"
          : device_work_only() ? "with every step done, waiting for its work on the device to run"
          : completed_ == plan_->steps.size()
              ? "with every step done, waiting for the other ranks to end the call"
              : "with " + std::to_string(plan_->steps.size() - completed_) + " steps left";
  } else {
    const auto id = static_cast<schedule::step_id>(at);
    const schedule::step& st = step_at(id);
    const std::string kind(schedule::to_string(st.kind));
    if (st.kind == schedule::step_kind::wait) {
      std::string from;
      for (const auto& [tag, source] : book_->flag_sources)
        if (tag == st.tag) from += (from.empty() ? "" : ", ") + std::to_string(source);
      why = "in a wait for " + std::to_string(st.count) + " flags with tag " + std::to_string(st.tag) +
            ", of which " + std::to_string(flags(st.tag)) + " arrived" +
            (from.empty() ? "" : " (from rank(s) " + from + ")");
    } else if (st.kind == schedule::step_kind::recv || st.kind == schedule::step_kind::recv_reduce) {
      const std::string_view via = route(id);
      why = "waiting for data from rank " + std::to_string(st.peer) + " (" + kind + ", tag " +
            schedule::p2p::tag_text(sig_.kind, st.tag) + (via.empty() ? "" : ", " + std::string(via)) + ")";
    } else {
      why = "waiting for rank " + std::to_string(st.peer) + " to take a " + kind + " (tag " +
            schedule::p2p::tag_text(sig_.kind, st.tag) + ")";
    }
  }
  if (const auto& queued = book_->queued; !queued.empty()) {
    std::size_t receives = 0;
    for (schedule::step_id id : queued) receives += step_at(id).kind == schedule::step_kind::send ? 0 : 1;
    why += "; " + std::to_string(queued.size()) + " post(s) held back by back-pressure (" + std::to_string(receives) +
           " of them receives), first step " + std::to_string(queued.front()) + " to rank " +
           std::to_string(step_at(queued.front()).peer);
  }
  return why + stall_detail();
}

}  // namespace mimatrix::transport
