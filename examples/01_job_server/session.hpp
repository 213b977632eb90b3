// One connection the job server holds: a worker (or an observer) as the server knows it,
// and the coroutine that writes what the server sends it.
#pragma once

#include <boost/asio.hpp>
#include <fcntl.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "auth.hpp"
#include "balance.hpp"
#include "protocol.hpp"

namespace mimatrix::job::detail {

/// @par Thread Safety
/// The server's io_context thread only.
struct session {
  using clock = std::chrono::steady_clock;

  explicit session(boost::asio::ip::tcp::socket s) : socket(std::move(s)), wake(socket.get_executor()) {
    wake.expires_at(clock::time_point::max());
    connected = last_seen = clock::now();
  }
  void send(const message& m) {
    if (closed) return;
    outbox.push_back(encode(m));
    wake.cancel_one();
  }
  bool in_generation(std::uint64_t g) const { return member_of == g && g != 0; }

  boost::asio::ip::tcp::socket socket;
  boost::asio::steady_timer wake;  // the writer sleeps on it until the outbox fills
  std::deque<std::vector<std::byte>> outbox;
  bool closed = false, registered = false, role_worker = true, left = false;
  std::uint64_t id = 0, member_of = 0;
  std::uint32_t rank = 0, batch = 0;
  worker_info info;
  heartbeat last;
  throughput_estimate speed;
  clock::time_point connected, last_seen;
  nonce challenge{};
  std::string peer;
};
using session_ptr = std::shared_ptr<session>;

/// A process the server's process starts (a launcher, a worker beside it) must not keep
/// its port open past the server: Asio leaves descriptors inheritable.
inline void close_on_exec(int fd) { ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC); }

/// Writes the session's outbox as it fills until the session is closed and the outbox
/// empty (or the peer is gone), then closes the socket.
inline boost::asio::awaitable<void> write_outbox(session_ptr s) {
  namespace asio = boost::asio;
  try {
    while (!s->closed || !s->outbox.empty()) {
      while (!s->outbox.empty()) {
        co_await asio::async_write(s->socket, asio::buffer(s->outbox.front()), asio::use_awaitable);
        s->outbox.pop_front();
      }
      if (s->closed) break;
      boost::system::error_code ec;
      co_await s->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
  } catch (const std::exception&) {
  }
  boost::system::error_code ignored;
  s->socket.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  s->socket.close(ignored);
}

}  // namespace mimatrix::job::detail
