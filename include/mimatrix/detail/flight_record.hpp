// The flight record (MIMATRIX_FLIGHT_RECORD): a communicator's last N calls in a fixed
// ring, written at each call's start and end, so that a hung job can say which rank is
// stuck, in which call, on which step. flight_dump.hpp writes it out as JSON.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <system_error>
#include <time.h>
#include <vector>

#include "mimatrix/core/dtype.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/transport/stall_note.hpp"

namespace mimatrix::detail {

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

/// What a call's start writes: small and trivially copyable, so that the ring's slot of
/// a call is two cache lines (the slot of each new call is a line the cache lost).
struct flight_start {
  std::uint64_t sequence = 0;
  std::uint64_t in_count = 0, out_count = 0;
  std::int64_t started_ns = 0;  // wall clock, since the epoch
  std::uint32_t tag = 0;
  std::int32_t root = -1;  // broadcast's; -1 for the others
  schedule::collective kind = schedule::collective::allreduce;
  reduce::op_kind op = reduce::op_kind::sum;
  dtype type = dtype::float32;
  flight_path path = flight_path::host;
  bool barrier = false;
  bool lowered = false;  // ran the one-sided steps lowered to two-sided ones
  char algorithm[22] = {};
};

/// One call, as a snapshot holds it.
struct flight_entry : flight_start {
  /// Failed: when its failure was seen; completed: an upper bound, the next call's start
  /// (or the snapshot's time); 0 while in flight.
  std::int64_t ended_ns = 0;
  flight_state state = flight_state::started;
  int error = 0;  // errc, when failed
  // The stalled step, from the call's note; step -1: none seen.
  std::int64_t stall_step = -1;
  std::int32_t stall_peer = -1;
  std::uint32_t stall_tag = 0;
  std::uint64_t stall_bytes = 0;
  schedule::step_kind stall_kind = schedule::step_kind::send;
  std::string message;  // the failure's
};

/// Every entry at one moment, oldest first.
struct flight_snapshot {
  std::vector<flight_entry> calls;
  std::uint64_t recorded = 0;  // calls started
  std::size_t capacity = 0;
};

/// The wall clock, coarse (CLOCK_REALTIME_COARSE: the kernel's last tick, 1 to 4 ms): a
/// precise read costs a tenth of a small call on a VM, and a hang is seconds long.
inline std::int64_t wall_now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &t);
  return std::int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

/// Copies `from` into `to`, cut to fit and always terminated.
template <std::size_t N>
void copy_cut(char (&to)[N], std::string_view from) {
  const std::size_t n = std::min(from.size(), N - 1);
  std::memcpy(to, from.data(), n);
  to[n] = '\0';
}

/// A call's slot of the ring: what its start wrote, under a sequence lock (one writer: the
/// thread that starts the communicator's calls), and its end and stall as atomics, which
/// other threads write (the one that sees it end; its executor's).
struct alignas(64) flight_slot {
  std::atomic<std::uint32_t> version{0};  // odd while the start is written
  std::atomic<flight_state> state{flight_state::started};
  std::atomic<int> error{0};
  std::atomic<std::uint64_t> owner{~0ull};  // the sequence whose end and stall count here
  std::atomic<std::int64_t> ended_ns{0};
  flight_start start;
  transport::stall_note stall;
};
static_assert(sizeof(flight_slot) == 128, "a slot is two cache lines");

/// @par Thread Safety
/// start() from the thread that starts the communicator's calls (one at a time, as
/// communicator_state::take_sequence enforces); finish(), snapshot() and the stall notes
/// from any thread. No lock on the call path: a snapshot retries a slot being rewritten.
class flight_record {
 public:
  /// Keeps the last `capacity` calls, rounded up to a power of two (a mask, not a division,
  /// finds a call's slot: a 64-bit division is a tenth of the record's cost).
  explicit flight_record(std::size_t capacity)
      : ring_(std::bit_ceil(std::max<std::size_t>(capacity, 1))), mask_(ring_.size() - 1) {}

  /// Enters call `e` (its times and state aside); returns the note its executor writes
  /// where it stalls.
  transport::stall_note* start(const flight_start& e) {
    flight_slot& s = ring_[e.sequence & mask_];
    [[maybe_unused]] const auto locked = sanitizer_lock();
    const std::uint32_t v = s.version.load(std::memory_order_relaxed);
    s.version.store(v + 1, std::memory_order_relaxed);
    fence(std::memory_order_release);
    s.owner.store(e.sequence, std::memory_order_relaxed);
    s.state.store(flight_state::started, std::memory_order_relaxed);
    s.stall.step.store(-1, std::memory_order_relaxed);
    s.start = e;
    s.start.started_ns = wall_now_ns();
    s.version.store(v + 2, std::memory_order_release);
    if (e.sequence + 1 > recorded_.load(std::memory_order_relaxed))
      recorded_.store(e.sequence + 1, std::memory_order_relaxed);
    // The next call's slot, a line the cache lost 2,048 calls ago, fetched while this runs.
    __builtin_prefetch(&ring_[(e.sequence + 1) & mask_], 1);
    __builtin_prefetch(reinterpret_cast<const char*>(&ring_[(e.sequence + 1) & mask_]) + 64, 1);
    return &s.stall;
  }

  /// Ends call `sequence` (unless a later call took its slot): completed, or failed with
  /// `ec` and `message`.
  void finish(std::uint64_t sequence, const std::error_code& ec, std::string_view message) {
    flight_slot& s = ring_[sequence & mask_];
    if (s.owner.load(std::memory_order_relaxed) != sequence) return;
    if (ec) {
      s.ended_ns.store(wall_now_ns(), std::memory_order_relaxed);
      s.error.store(ec.value(), std::memory_order_relaxed);
      std::lock_guard lock(failures_mutex_);  // failures only: the message is a string
      failures_.push_back({sequence, std::string(message)});
      if (failures_.size() > 16) failures_.erase(failures_.begin());
    }
    s.state.store(ec ? flight_state::failed : flight_state::completed, std::memory_order_release);
  }

  flight_snapshot snapshot() const {
    flight_snapshot out;
    out.capacity = ring_.size();
    out.recorded = recorded_.load(std::memory_order_relaxed);
    const std::uint64_t first = out.recorded > ring_.size() ? out.recorded - ring_.size() : 0;
    for (const flight_slot& s : ring_) {
      flight_entry e;
      if (!read_start(s, e, sanitizer_lock()) || e.sequence < first) continue;
      if (s.owner.load(std::memory_order_relaxed) == e.sequence) {
        e.state = s.state.load(std::memory_order_acquire);
        if (e.state == flight_state::failed) e.ended_ns = s.ended_ns.load(std::memory_order_relaxed);
        if (e.state == flight_state::failed) e.error = s.error.load(std::memory_order_relaxed);
        copy_note(s.stall, e);
      }
      out.calls.push_back(std::move(e));
    }
    std::sort(out.calls.begin(), out.calls.end(),
              [](const flight_entry& a, const flight_entry& b) { return a.sequence < b.sequence; });
    // A completed call's end is not read (the clock would be a second read a call): it
    // ended by the next call's start, or by now.
    const std::int64_t now = wall_now_ns();
    for (std::size_t k = 0; k < out.calls.size(); ++k)
      if (out.calls[k].state == flight_state::completed)
        out.calls[k].ended_ns = k + 1 < out.calls.size() ? out.calls[k + 1].started_ns : now;
    std::lock_guard lock(failures_mutex_);
    for (flight_entry& e : out.calls)
      for (const auto& [sequence, message] : failures_)
        if (sequence == e.sequence) e.message = message;
    return out;
  }

  std::size_t capacity() const { return ring_.size(); }

 private:
  /// The start of `s` into `e`; false if none was written yet. Retries while it is rewritten.
  static bool read_start(const flight_slot& s, flight_entry& e, const std::unique_lock<std::mutex>&) {
    for (;;) {
      const std::uint32_t before = s.version.load(std::memory_order_acquire);
      if (before == 0) return false;
      if (before & 1) continue;
      static_cast<flight_start&>(e) = s.start;
      fence(std::memory_order_acquire);
      if (s.version.load(std::memory_order_relaxed) == before) return true;
    }
  }
  // ThreadSanitizer takes no fences (g++ refuses them) and would report the sequence lock's
  // deliberate races on a slot's start: under it, a mutex orders writer and reader instead.
#if defined(__SANITIZE_THREAD__)
  static constexpr bool sanitized = true;
#else
  static constexpr bool sanitized = false;
#endif
  static void fence(std::memory_order order) {
    if constexpr (!sanitized) std::atomic_thread_fence(order);
  }
  std::unique_lock<std::mutex> sanitizer_lock() const {
    if constexpr (sanitized) return std::unique_lock<std::mutex>(sanitizer_mutex_);
    return {};
  }
  static void copy_note(const transport::stall_note& n, flight_entry& e) {
    const std::int64_t step = n.step.load(std::memory_order_acquire);
    if (step < 0) return;
    e.stall_step = step;
    e.stall_peer = n.peer.load(std::memory_order_relaxed);
    e.stall_tag = n.tag.load(std::memory_order_relaxed);
    e.stall_bytes = n.bytes.load(std::memory_order_relaxed);
    e.stall_kind = static_cast<schedule::step_kind>(n.kind.load(std::memory_order_relaxed));
  }

  std::vector<flight_slot> ring_;
  std::uint64_t mask_;
  std::atomic<std::uint64_t> recorded_{0};
  mutable std::mutex failures_mutex_;
  mutable std::mutex sanitizer_mutex_;  // under ThreadSanitizer only (sanitizer_lock)
  std::vector<std::pair<std::uint64_t, std::string>> failures_;  // the last 16 failures' messages
};

}  // namespace mimatrix::detail
