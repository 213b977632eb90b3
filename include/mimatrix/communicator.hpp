// communicator: a group of ranks bound to one transport endpoint, with the settings
// and the call sequence numbers that its collectives share.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "mimatrix/call_record.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/options.hpp"
#include "mimatrix/detail/communicator_state.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix {

/// @par Thread Safety
/// Used by one thread at a time (its progress thread, if set, is its own business).
/// Every rank must start the collectives of a communicator in the same order, as with MPI
/// and NCCL; they may be waited for in any order.
template <transport::backend Transport>
class communicator {
 public:
  /// Builds the transport endpoint from `args` (for inproc: the world and the rank).
  template <class... Args>
    requires std::constructible_from<Transport, Args...>
  explicit communicator(Args&&... args) : transport_(std::forward<Args>(args)...) {
    set_progress(state_.settings().progress);
    state_.opened(rank(), size(), transport_name());
    state_.open_timeline(group(), world_rank());
    state_.open_flight_record(group(), world_rank(), rank(), size());
  }
  ~communicator() { state_.closing(rank(), size()); }

  /// What split() builds a part with: its transport, and the parent's settings.
  struct split_tag {};
  communicator(split_tag, Transport&& part, const options& settings) : transport_(std::move(part)) {
    state_.settings() = settings;
    set_progress(settings.progress);
    state_.opened(rank(), size(), transport_name());
    state_.open_timeline(group(), world_rank());
    state_.open_flight_record(group(), world_rank(), rank(), size());
  }

  /// Calls `hook` with the record of every call that finishes from now on (collective,
  /// algorithm, dtype, bytes, start and end, bus bandwidth, the peer waited on), on the
  /// thread that sees it finish. MIMATRIX_TIMELINE=file.json adds one that writes a
  /// Chrome trace. Add hooks before calls are in flight.
  void on_call(call_hook hook) { state_.add_call_hook(std::move(hook)); }

  /// Ends every call in flight and every later one, here and on every rank, with
  /// errc::aborted naming this rank and `why` (as ncclCommAbort). Safe from any thread: a
  /// watchdog's, or a job server client's. The communicator is then only good to destroy.
  void abort(const std::string& why = {})
    requires requires(Transport& t, const std::string& w) { t.abort(w); }
  {
    transport_.abort(why);
  }

  /// A failure known before anyone waits (as ncclCommGetAsyncError): an abort, a failed
  /// call here or on another rank, a peer on this host whose process ended. Safe from any
  /// thread.
  std::optional<error> async_error()
    requires requires(Transport& t) { { t.async_error() } -> std::same_as<std::optional<error>>; }
  {
    return transport_.async_error();
  }

  /// As MPI_Comm_split and ncclCommSplit: collective over this communicator. Ranks that
  /// pass one color form a new communicator, ranked by `key` (ties: by rank here), with
  /// this one's timeout and progress mode; a negative color gives none (MPI_UNDEFINED).
  /// The parts live on their own: this one may go on, or end first.
  std::optional<communicator> split(int color, int key)
    requires requires(const Transport& t, int c) {
      { t.split(c, c) } -> std::same_as<std::optional<Transport>>;
    }
  {
    std::optional<Transport> part = transport_.split(color, key);
    if (!part) return std::nullopt;
    return std::optional<communicator>(std::in_place, split_tag{}, std::move(*part), state_.settings());
  }

  /// Writes this communicator's flight record (its last MIMATRIX_FLIGHT_RECORD calls, and
  /// the step each call in flight waits on) as JSON to `path`, by default
  /// `$MIMATRIX_FLIGHT_RECORD_DIR/flight.<group>.rank<world rank>.json` (/tmp without the
  /// setting), and returns the path; scripts/mimatrix-trace reads every rank's. Safe from
  /// any thread, while calls run: it copies the record under a short lock and writes after.
  /// Throws `invalid_argument` when the record is off or the file cannot be written.
  std::string dump_flight_record(const std::string& path = {}) const { return state_.dump_flight_record(path, rank()); }

  int rank() const { return transport_.rank(); }
  int size() const { return transport_.size(); }
  /// The rank of this process in the world this communicator was split from (its own rank
  /// where it was not split, or where the transport does not tell).
  int world_rank() const {
    if constexpr (requires { transport_.world_rank(); }) return transport_.world_rank();
    else return rank();
  }
  /// The group as the transport names it: alike on its ranks, unlike any other group this
  /// process opened ("world/0", "world/0split0/color1/0"); the transport's name where it
  /// does not tell. Timeline files are named by it (MIMATRIX_TIMELINE).
  std::string group() const {
    if constexpr (requires { transport_.group(); }) return transport_.group();
    else return transport_name();
  }

  Transport& transport() { return transport_; }
  const Transport& transport() const { return transport_; }
  const options& settings() const { return state_.settings(); }
  /// How long a call may wait for its peers; beyond max_timeout ("never") it is cut to it.
  void set_timeout(std::chrono::milliseconds timeout) { state_.settings().timeout = bounded_timeout(timeout); }

  /// Who advances calls in flight (default: MIMATRIX_PROGRESS, else the caller). With
  /// progress_mode::thread, a thread of this communicator drives every started call while
  /// the caller computes; test() and wait() still advance them too.
  void set_progress(progress_mode mode) {
    state_.settings().progress = mode;
    if constexpr (transport::has_progress_engine<Transport>) detail::set_progress_mode(transport_.progress(), mode);
  }

  /// The sequence number the next call will take; every rank numbers its calls alike, and
  /// a call's request keeps its own (request::sequence). Reading it changes nothing. (A
  /// second thread starting a call while another thread's are in flight is refused with
  /// `invalid_argument` at that call: the peers could not share its order.)
  std::uint64_t next_sequence() const { return state_.next_sequence(); }

  /// The schedules its collectives built, least recently used evicted first
  /// (detail/plan_cache.hpp).
  detail::plan_cache& plans() { return state_.plans(); }
  const detail::plan_cache& plans() const { return state_.plans(); }

  /// What the collectives share, for them (detail/).
  detail::communicator_state& state() { return state_; }

 private:
  static const char* transport_name() {
    if constexpr (requires { Transport::name; }) return Transport::name;
    else return "a transport";
  }

  Transport transport_;
  detail::communicator_state state_{transport_.rank()};
};

}  // namespace mimatrix
