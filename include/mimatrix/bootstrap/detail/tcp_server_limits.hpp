// What the rendezvous store's server lets its clients make it hold, and how long it waits
// for them: the bounds that keep a broken or hostile client from costing it memory or a core.
#pragma once

#include <chrono>
#include <cstddef>

namespace mimatrix::bootstrap::detail {

/// What all the clients of one server together may make it hold.
struct tcp_server_limits {
  /// Requests being received (a body is buffered whole before it is served) and the keys
  /// of gets parked until their key is set. A request that would pass it is refused.
  std::size_t buffered_bytes = std::size_t{64} << 20;
  /// Keys and values stored. A set that would pass it is refused.
  std::size_t stored_bytes = std::size_t{512} << 20;
  /// A connection that has sent nothing since it opened is closed after this long (its
  /// client reconnects when it first asks: tcp_store does).
  std::chrono::milliseconds silent{30000};
  /// A request whose bytes stop coming this long is dropped with its connection.
  std::chrono::milliseconds stalled_request{10000};
  /// How long accepting pauses when the process is out of file descriptors.
  std::chrono::milliseconds accept_backoff{100};
  /// At most how long a stopping server still answers requests that had arrived and sends
  /// replies it had queued (a barrier's last arriver may be the rank that hosts it).
  std::chrono::milliseconds drain{250};
};

}  // namespace mimatrix::bootstrap::detail
