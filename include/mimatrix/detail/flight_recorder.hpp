// A communicator's flight record with who it belongs to, and the three ways it is dumped:
// on request (communicator::dump_flight_record), on the signal (flight_signal.hpp), and
// once by itself when a call times out, is aborted, loses a peer or finds a mismatch.
#pragma once

#include <atomic>
#include <cstdio>
#include <string>
#include <string_view>
#include <system_error>

#include "mimatrix/core/error.hpp"
#include "mimatrix/core/log.hpp"
#include "mimatrix/core/operation.hpp"
#include "mimatrix/detail/flight_dump.hpp"
#include "mimatrix/detail/flight_record.hpp"
#include "mimatrix/detail/flight_signal.hpp"

namespace mimatrix::detail {

/// @par Thread Safety
/// Every member from any thread.
class flight_recorder final : public call_observer {
 public:
  flight_recorder(std::size_t capacity, flight_member who, int signal) : record_(capacity), who_(std::move(who)) {
    flight_signal::process().add(this, [this] { dump_quietly("signal"); }, signal);
  }
  ~flight_recorder() { flight_signal::process().remove(this); }
  flight_recorder(const flight_recorder&) = delete;
  flight_recorder& operator=(const flight_recorder&) = delete;

  flight_record& record() { return record_; }
  const flight_member& member() const { return who_; }

  /// Writes the dump to `path` (empty: flight_path()); returns the path written. Throws
  /// `invalid_argument` when it cannot be written.
  std::string dump(const std::string& path, std::string_view reason) const {
    const std::string to = path.empty() ? flight_path(who_) : path;
    write_flight_dump(to, who_, record_.snapshot(), reason);
    return to;
  }

  void call_ended(std::uint64_t sequence, const std::error_code& ec, const operation& op) noexcept override {
    record_.finish(sequence, ec, ec ? std::string_view(message_of(op)) : std::string_view());
    if (ec) call_failed(ec);
  }

  /// A call ended with `ec`: the first timeout, abort, lost peer or mismatch of this
  /// communicator dumps (the later ones are the same hang's echoes).
  void call_failed(const std::error_code& ec) {
    const bool hang = ec == errc::timeout || ec == errc::aborted || ec == errc::peer_lost || ec == errc::mismatch;
    if (!hang || dumped_on_failure_.exchange(true)) return;
    dump_quietly(ec == errc::timeout   ? "timeout"
                 : ec == errc::aborted ? "aborted"
                 : ec == errc::mismatch ? "mismatch"
                                        : "peer_lost");
  }

 private:
  /// A dump that cannot be written is said on stderr, never thrown into a call.
  void dump_quietly(std::string_view reason) const noexcept {
    try {
      const std::string to = dump({}, reason);
      if (log_enabled(log_level::info)) log(log_level::info, "flight record (" + std::string(reason) + ") in " + to);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mimatrix: %s\n", e.what());
    }
  }

  flight_record record_;
  flight_member who_;
  std::atomic<bool> dumped_on_failure_{false};
};

}  // namespace mimatrix::detail
