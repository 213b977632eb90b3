// The flight record (MIMATRIX_FLIGHT_RECORD): a communicator's last N calls in a fixed
// ring, written at each call's start and end, so that a hung job can say which rank is
// stuck, in which call, on which step. flight_dump.hpp writes it out as JSON.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string_view>
#include <system_error>
#include <vector>

#include "mimatrix/core/dtype.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::detail {

/// The step a stalled call waits on, as its executor last saw it (only on the stall path:
/// at its first check after ended_check_interval of waiting, and when it fails). Relaxed
/// atomics: a dump may read one field of a newer note than another, never a torn field.
struct flight_stall_note {
  std::atomic<std::int64_t> step{-1};  // -1: no stall seen
  std::atomic<std::int32_t> peer{-1};
  std::atomic<std::uint32_t> tag{0};
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint8_t> kind{0};  // schedule::step_kind

  void note(std::int64_t at, int from, std::uint32_t with_tag, std::uint64_t size, schedule::step_kind k) {
    peer.store(from, std::memory_order_relaxed);
    tag.store(with_tag, std::memory_order_relaxed);
    bytes.store(size, std::memory_order_relaxed);
    kind.store(static_cast<std::uint8_t>(k), std::memory_order_relaxed);
    step.store(at, std::memory_order_release);
  }
};

enum class flight_state : std::uint8_t { started, completed, failed };

constexpr std::string_view to_string(flight_state s) {
  return s == flight_state::started ? "started" : s == flight_state::completed ? "completed" : "failed";
}

/// Where a call's data ran: host memory, device memory the transport reaches, or device
/// memory staged through the host.
enum class flight_path : std::uint8_t { host, device, staged };

constexpr std::string_view to_string(flight_path p) {
  return p == flight_path::host ? "host" : p == flight_path::device ? "device" : "staged";
}

/// One call. Trivially copyable, fixed size: the ring never allocates on the steady path.
struct flight_entry {
  std::uint64_t sequence = 0;
  std::uint64_t in_count = 0, out_count = 0;
  std::int64_t started_ns = 0, ended_ns = 0;  // wall clock, since the epoch; ended: 0 while in flight
  std::uint32_t tag = 0;
  std::int32_t root = -1;  // broadcast's; -1 for the others
  schedule::collective kind = schedule::collective::allreduce;
  reduce::op_kind op = reduce::op_kind::sum;
  dtype type = dtype::float32;
  flight_state state = flight_state::started;
  flight_path path = flight_path::host;
  bool barrier = false;
  bool lowered = false;   // ran the one-sided steps lowered to two-sided ones
  int error = 0;          // errc, when failed
  char algorithm[24] = {};
  char message[160] = {};  // the failure's, cut
  // The stalled step, copied from the call's note by snapshot(); step -1: none seen.
  std::int64_t stall_step = -1;
  std::int32_t stall_peer = -1;
  std::uint32_t stall_tag = 0;
  std::uint64_t stall_bytes = 0;
  schedule::step_kind stall_kind = schedule::step_kind::send;
};

/// What a call's start writes: the entry, less its times and state.
struct flight_call {
  flight_entry entry;
  const flight_stall_note* note = nullptr;  // the call's, while it is in flight
};

/// Every entry at one moment, oldest first.
struct flight_snapshot {
  std::vector<flight_entry> calls;
  std::uint64_t recorded = 0;  // calls ever started; more than calls.size() when the ring wrapped
  std::size_t capacity = 0;
};

inline std::int64_t wall_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// Copies `from` into `to`, cut to fit and always terminated.
template <std::size_t N>
void copy_cut(char (&to)[N], std::string_view from) {
  const std::size_t n = std::min(from.size(), N - 1);
  std::memcpy(to, from.data(), n);
  to[n] = '\0';
}

/// @par Thread Safety
/// Every member from any thread: one short lock around each write and each snapshot (a
/// dump copies under it and writes the file after, so calls never wait for a disk).
class flight_record {
 public:
  explicit flight_record(std::size_t capacity) : ring_(std::max<std::size_t>(capacity, 1)), notes_(ring_.size()) {}

  /// The call took its slot: a handle that finish() gives back.
  struct slot {
    std::size_t index = 0;
    std::uint64_t sequence = 0;
  };

  slot start(const flight_entry& e, const flight_stall_note* note) {
    const std::int64_t now = wall_now_ns();
    std::lock_guard lock(mutex_);
    const std::size_t at = std::size_t(recorded_++ % ring_.size());
    ring_[at] = e;
    ring_[at].started_ns = now;
    notes_[at] = note;
    return {at, e.sequence};
  }

  /// Ends the call in `s` (unless a later call took its slot): completed, or failed with
  /// `ec` and `message`. The call's note is read here a last time, then let go of.
  void finish(slot s, const std::error_code& ec, std::string_view message) {
    const std::int64_t now = wall_now_ns();
    std::lock_guard lock(mutex_);
    flight_entry& e = ring_[s.index];
    if (e.sequence != s.sequence || e.state != flight_state::started) return;
    e.ended_ns = now;
    e.state = ec ? flight_state::failed : flight_state::completed;
    if (ec) {
      e.error = ec.value();
      copy_cut(e.message, message);
    }
    copy_note(s.index);
    notes_[s.index] = nullptr;
  }

  /// The call in `s` is let go of unfinished (its request dropped by an exception): its
  /// note goes with it.
  void release(slot s) {
    std::lock_guard lock(mutex_);
    if (ring_[s.index].sequence != s.sequence) return;
    copy_note(s.index);
    notes_[s.index] = nullptr;
  }

  flight_snapshot snapshot() const {
    flight_snapshot out;
    out.capacity = ring_.size();
    std::lock_guard lock(mutex_);
    const std::size_t n = std::size_t(std::min<std::uint64_t>(recorded_, ring_.size()));
    out.recorded = recorded_;
    out.calls.resize(n);
    const std::size_t first = std::size_t((recorded_ - n) % ring_.size());
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t at = (first + k) % ring_.size();
      copy_note(at);
      out.calls[k] = ring_[at];
    }
    return out;
  }

  std::size_t capacity() const { return ring_.size(); }

 private:
  /// The note's step into the entry; under mutex_. Mutable state: a snapshot refreshes it.
  void copy_note(std::size_t at) const {
    const flight_stall_note* n = notes_[at];
    if (!n) return;
    const std::int64_t step = n->step.load(std::memory_order_acquire);
    if (step < 0) return;
    flight_entry& e = ring_[at];
    e.stall_step = step;
    e.stall_peer = n->peer.load(std::memory_order_relaxed);
    e.stall_tag = n->tag.load(std::memory_order_relaxed);
    e.stall_bytes = n->bytes.load(std::memory_order_relaxed);
    e.stall_kind = static_cast<schedule::step_kind>(n->kind.load(std::memory_order_relaxed));
  }

  mutable std::mutex mutex_;
  mutable std::vector<flight_entry> ring_;
  std::vector<const flight_stall_note*> notes_;  // of the calls in flight, by slot
  std::uint64_t recorded_ = 0;
};

}  // namespace mimatrix::detail
