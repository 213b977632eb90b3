// The rendezvous store over TCP: rank 0 serves it from a background thread, every rank
// (rank 0 too) is a client. What MASTER_ADDR/MASTER_PORT and MIMATRIX_STORE=tcp:// open.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "mimatrix/bootstrap/detail/counter.hpp"
#include "mimatrix/bootstrap/detail/fd.hpp"
#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/options.hpp"

namespace mimatrix::bootstrap {

namespace detail {

// The wire protocol. Every message is a frame: a 4-byte big-endian length, then that many
// bytes of body.
//   request: u8 op, u32 key length, key, then  set: value | get: u32 timeout ms | add: i64 delta
//   reply:   u8 status, then  ok: value (get) or i64 (add) or nothing (set) | error: message
// A get of an absent key waits in the server, which answers at once when some rank sets the
// key, or `timeout` after the request with status timeout: the client never spins.
// Both ends bound a frame by max_key_bytes and max_value_bytes (store.hpp): the server
// answers a set or key over them with status error, and drops a connection whose length
// prefix is over tcp_max_request; a client fails on a reply over tcp_max_reply before
// allocating for it.
enum class tcp_op : std::uint8_t { set = 1, get = 2, add = 3 };
enum class tcp_status : std::uint8_t { ok = 0, timeout = 1, error = 2 };

inline constexpr std::size_t tcp_max_request = 1 + 4 + max_key_bytes + max_value_bytes;  // larger is garbage
inline constexpr std::size_t tcp_max_reply = 1 + max_value_bytes;  // a value, a counter or an error message

inline void put_u32(std::vector<std::byte>& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::byte>(v >> shift));
}
inline void put_u64(std::vector<std::byte>& out, std::uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<std::byte>(v >> shift));
}
inline std::uint64_t get_uint(const std::byte* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}

/// One frame: its length prefix, then `body`.
inline std::vector<std::byte> make_frame(const std::vector<std::byte>& body) {
  std::vector<std::byte> frame;
  frame.reserve(4 + body.size());
  put_u32(frame, static_cast<std::uint32_t>(body.size()));
  frame.insert(frame.end(), body.begin(), body.end());
  return frame;
}

inline std::vector<std::byte> reply_body(tcp_status status, const std::byte* data = nullptr, std::size_t n = 0) {
  // resize + memcpy rather than insert: GCC 12 warns (-Warray-bounds) about the latter.
  std::vector<std::byte> body(1 + n);
  body[0] = static_cast<std::byte>(status);
  if (n) std::memcpy(body.data() + 1, data, n);
  return body;
}

/// The server of a tcp_store: a poll() loop on one thread over the listening socket, a
/// wake-up pipe and every client connection. It owns the values; nothing else touches them.
class tcp_server {
 public:
  /// Binds `port` on every address (0: one the kernel picks) and starts serving.
  explicit tcp_server(int port) {
    listen_ = bind_any(port);
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    ::getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0)
      throw error(errc::transport, "rendezvous store on port " + std::to_string(port_) +
                                       ": could not make a wake-up pipe: " + errno_text(errno));
    wake_read_.reset(pipe_fds[0]);
    wake_write_.reset(pipe_fds[1]);
    thread_ = std::thread([this] { run(); });
  }

  tcp_server(const tcp_server&) = delete;
  tcp_server& operator=(const tcp_server&) = delete;

  ~tcp_server() {
    const char stop = 1;
    (void)!::write(wake_write_.get(), &stop, 1);
    thread_.join();
  }

  int port() const noexcept { return port_; }

 private:
  struct client {
    unique_fd fd;
    std::vector<std::byte> in;
    std::vector<std::byte> out;
    std::size_t out_sent = 0;  // of `out`: erasing sent bytes each time would copy a large value again and again
    bool closed = false;
  };
  struct waiter {
    std::uint64_t client;
    std::string key;
    std::chrono::steady_clock::time_point deadline;
  };

  static unique_fd bind_any(int port) {
    const int one = 1, zero = 0;
    auto fail = [&](int e) -> error {
      std::string hint = e == EADDRINUSE ? " (another job or store is using it: choose another MASTER_PORT)" : "";
      return error(errc::transport, "rank 0 could not serve the rendezvous store on port " + std::to_string(port) +
                                        ": " + errno_text(e) + hint);
    };
    // Dual-stack IPv6 first, so that clients reach it by IPv4 or IPv6 addresses alike.
    unique_fd fd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd) {
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<std::uint16_t>(port));
      if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        if (::listen(fd.get(), SOMAXCONN) != 0) throw fail(errno);
        set_nonblocking(fd.get(), true);
        return fd;
      }
      if (errno == EADDRINUSE || errno == EACCES) throw fail(errno);
    }
    fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) throw fail(errno);
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw fail(errno);
    if (::listen(fd.get(), SOMAXCONN) != 0) throw fail(errno);
    set_nonblocking(fd.get(), true);
    return fd;
  }

  void run() {
    std::vector<pollfd> fds;
    std::vector<std::uint64_t> ids;
    for (;;) {
      fds.clear();
      ids.clear();
      fds.push_back({wake_read_.get(), POLLIN, 0});
      fds.push_back({listen_.get(), POLLIN, 0});
      for (auto& [id, c] : clients_) {
        fds.push_back({c.fd.get(), static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
        ids.push_back(id);
      }
      int wait_ms = -1;
      if (!waiters_.empty()) {
        auto first = std::min_element(waiters_.begin(), waiters_.end(),
                                      [](const waiter& a, const waiter& b) { return a.deadline < b.deadline; });
        const auto left = first->deadline - std::chrono::steady_clock::now();
        wait_ms = static_cast<int>(std::clamp<std::int64_t>(  // a 49-day get must not wrap to "forever"
            std::chrono::ceil<std::chrono::milliseconds>(left).count(), 0, 1 << 30));
      }
      if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) return;
      if (fds[0].revents) return;  // the destructor asks us to stop
      if (fds[1].revents & POLLIN) accept_all();
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        auto it = clients_.find(ids[i - 2]);
        if (it == clients_.end()) continue;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) receive(it->first, it->second);
        if (fds[i].revents & POLLOUT) flush(it->second);
      }
      expire_waiters();
      for (auto it = clients_.begin(); it != clients_.end();) {
        if (!it->second.closed) { ++it; continue; }
        const std::uint64_t gone = it->first;
        std::erase_if(waiters_, [&](const waiter& w) { return w.client == gone; });
        it = clients_.erase(it);
      }
    }
  }

  void accept_all() {
    for (;;) {
      unique_fd fd(::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd) return;  // EAGAIN, or a connection that went away before we took it
      const int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      clients_[next_id_++].fd = std::move(fd);
    }
  }

  void receive(std::uint64_t id, client& c) {
    std::byte buffer[64 * 1024];
    for (;;) {
      const ssize_t n = ::recv(c.fd.get(), buffer, sizeof buffer, 0);
      if (n > 0) { c.in.insert(c.in.end(), buffer, buffer + n); continue; }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) c.closed = true;
      break;
    }
    std::size_t at = 0;
    while (!c.closed && c.in.size() - at >= 4) {
      const auto length = static_cast<std::uint32_t>(get_uint(c.in.data() + at, 4));
      if (length > tcp_max_request || length < 5) { c.closed = true; break; }  // not our protocol
      if (c.in.size() - at - 4 < length) break;
      handle(id, c, c.in.data() + at + 4, length);
      at += 4 + length;
    }
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(at));
  }

  void handle(std::uint64_t id, client& c, const std::byte* body, std::uint32_t length) {
    const auto op = static_cast<tcp_op>(body[0]);
    const auto key_length = get_uint(body + 1, 4);
    if (key_length > length - 5) { c.closed = true; return; }
    if (key_length > max_key_bytes)
      return refuse(c, "a key of " + std::to_string(key_length) + " bytes is over the " +
                           std::to_string(max_key_bytes) + " bytes a key may take");
    std::string key(reinterpret_cast<const char*>(body + 5), key_length);
    const std::byte* rest = body + 5 + key_length;
    const std::size_t rest_length = length - 5 - key_length;
    switch (op) {
      case tcp_op::set:
        if (rest_length > max_value_bytes)
          return refuse(c, "the value of key '" + key + "' (" + std::to_string(rest_length) + " bytes) is over the " +
                               std::to_string(max_value_bytes) + " bytes a value may take");
        values_[key].assign(rest, rest + rest_length);
        reply(c, reply_body(tcp_status::ok));
        wake(key);
        return;
      case tcp_op::get: {
        if (rest_length != 4) { c.closed = true; return; }
        auto found = values_.find(key);
        if (found != values_.end()) {
          reply(c, reply_body(tcp_status::ok, found->second.data(), found->second.size()));
          return;
        }
        const auto wait = std::chrono::milliseconds(get_uint(rest, 4));
        waiters_.push_back({id, std::move(key), std::chrono::steady_clock::now() + wait});
        return;
      }
      case tcp_op::add: {
        if (rest_length != 8) { c.closed = true; return; }
        auto& value = values_[key];
        std::int64_t now = 0;
        if (!parse_counter(value, now)) return refuse(c, "key '" + key + "' holds a value that is not a counter");
        now = static_cast<std::int64_t>(static_cast<std::uint64_t>(now) + get_uint(rest, 8));
        value = counter_bytes(now);
        std::vector<std::byte> body_out{static_cast<std::byte>(tcp_status::ok)};
        put_u64(body_out, static_cast<std::uint64_t>(now));
        reply(c, body_out);
        wake(key);
        return;
      }
    }
    c.closed = true;  // an unknown operation: not one of our clients
  }

  void refuse(client& c, const std::string& why) {
    reply(c, reply_body(tcp_status::error, reinterpret_cast<const std::byte*>(why.data()), why.size()));
  }

  void wake(const std::string& key) {
    const auto& value = values_[key];
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->key != key) { ++it; continue; }
      auto c = clients_.find(it->client);
      if (c != clients_.end()) reply(c->second, reply_body(tcp_status::ok, value.data(), value.size()));
      it = waiters_.erase(it);
    }
  }

  void expire_waiters() {
    const auto now = std::chrono::steady_clock::now();
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->deadline > now) { ++it; continue; }
      auto c = clients_.find(it->client);
      if (c != clients_.end()) reply(c->second, reply_body(tcp_status::timeout));
      it = waiters_.erase(it);
    }
  }

  void reply(client& c, const std::vector<std::byte>& body) {
    const auto frame = make_frame(body);
    c.out.insert(c.out.end(), frame.begin(), frame.end());
    flush(c);
  }

  void flush(client& c) {
    while (c.out_sent < c.out.size()) {
      const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
      if (n > 0) { c.out_sent += static_cast<std::size_t>(n); continue; }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // POLLOUT resumes it
      c.closed = true;
      break;
    }
    c.out.clear();  // all sent (or the client is gone)
    c.out_sent = 0;
  }

  unique_fd listen_, wake_read_, wake_write_;
  int port_ = 0;
  // Touched by the server thread alone once it runs.
  std::map<std::uint64_t, client> clients_;
  std::vector<waiter> waiters_;
  std::map<std::string, std::vector<std::byte>> values_;
  std::uint64_t next_id_ = 0;
  std::thread thread_;  // last: starts after every member above exists
};

}  // namespace detail

/// A store served over TCP by the rank constructed with `serve` (rank 0), reached by
/// every rank through its own connection.
///
/// Rank 0 must keep its object alive until the other ranks are done with the store (end
/// the rendezvous with a barrier); destroying it stops the server.
///
/// @par Thread Safety
/// One object may be shared by threads: requests on it are serialized. Many processes and
/// objects may use one server.
class tcp_store final : public store {
 public:
  /// Connects to `host`:`port`, retrying until `timeout` (the serving rank may start
  /// later). With `serve`, first starts the server on `port` (0: one the kernel picks;
  /// port() says which). Throws errc::transport naming the port when it cannot serve, and
  /// errc::transport naming the address and the last error when it cannot connect in time.
  tcp_store(std::string host, int port, bool serve, std::chrono::milliseconds timeout)
      : host_(std::move(host)), port_(port), timeout_(bounded_timeout(timeout)) {
    if (port < 0 || port > 65535)
      throw error(errc::invalid_argument, "rendezvous store port " + std::to_string(port) + " is not in [0, 65535]");
    if (serve) {
      server_ = std::make_unique<detail::tcp_server>(port);
      port_ = server_->port();
    } else if (port == 0) {
      throw error(errc::invalid_argument, "cannot connect to a rendezvous store at tcp://" + host_ + ":0");
    }
    connect();
  }

  tcp_store(const tcp_store&) = delete;
  tcp_store& operator=(const tcp_store&) = delete;

  void set(const std::string& key, const std::vector<std::byte>& value) override {
    request(detail::tcp_op::set, key, value, timeout_);
  }

  std::vector<std::byte> get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::vector<std::byte> arg;
    const auto ms = std::clamp<std::int64_t>(timeout.count(), 0, std::numeric_limits<std::uint32_t>::max());
    detail::put_u32(arg, static_cast<std::uint32_t>(ms));
    // The server answers by the deadline; the margin covers the network and the server's loop.
    auto [status, value] = request(detail::tcp_op::get, key, arg, std::chrono::milliseconds(ms) + timeout_);
    if (status == detail::tcp_status::timeout)
      throw error(errc::timeout, "key '" + key + "' was not set in the rendezvous store at " + where() + " within " +
                                     std::to_string(ms) + " ms");
    return std::move(value);
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    std::vector<std::byte> arg;
    detail::put_u64(arg, static_cast<std::uint64_t>(delta));
    auto [status, value] = request(detail::tcp_op::add, key, arg, timeout_);
    if (value.size() != 8)
      throw error(errc::transport, "add to key '" + key + "' at " + where() + ": malformed reply");
    return static_cast<std::int64_t>(detail::get_uint(value.data(), 8));
  }

  std::string where() const override { return "tcp://" + host_ + ":" + std::to_string(port_); }

  /// The port the store is reached on (the kernel's pick when constructed with port 0).
  int port() const noexcept { return port_; }

 private:
  void connect() {
    const auto deadline = deadline_after(timeout_);
    std::string last_error = "none";
    for (;;) {
      if (try_connect(deadline, last_error)) return;
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero())
        throw error(errc::transport, "could not reach the rendezvous store at " + where() + " within " +
                                         std::to_string(timeout_.count()) + " ms (last error: " + last_error + ")");
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(50)));
    }
  }

  bool try_connect(std::chrono::steady_clock::time_point deadline, std::string& last_error) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string service = std::to_string(port_);
    if (const int rc = ::getaddrinfo(host_.c_str(), service.c_str(), &hints, &found); rc != 0) {
      last_error = ::gai_strerror(rc);
      return false;
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
    for (addrinfo* a = found; a; a = a->ai_next) {
      detail::unique_fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!fd) { last_error = detail::errno_text(errno); continue; }
      // Non-blocking, so that an address that drops packets cannot outlast the deadline.
      detail::set_nonblocking(fd.get(), true);
      int rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        pollfd p{fd.get(), POLLOUT, 0};
        if (::poll(&p, 1, static_cast<int>(std::clamp<std::int64_t>(left.count(), 1, 1 << 30))) <= 0) {
          last_error = "connection timed out";
          continue;
        }
        int e = 0;
        socklen_t len = sizeof e;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &e, &len);
        errno = e;
        rc = e ? -1 : 0;
      }
      if (rc != 0) { last_error = detail::errno_text(errno); continue; }
      detail::set_nonblocking(fd.get(), false);
      const int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      fd_ = std::move(fd);
      return true;
    }
    return false;
  }

  std::pair<detail::tcp_status, std::vector<std::byte>> request(detail::tcp_op op, const std::string& key,
                                                                 const std::vector<std::byte>& arg,
                                                                 std::chrono::milliseconds wait) {
    check_entry(key, op == detail::tcp_op::set ? arg.size() : 0);  // what the server would refuse
    std::lock_guard lock(mutex_);
    if (!fd_)
      throw error(errc::transport, "the connection to the rendezvous store at " + where() +
                                       " was lost by an earlier failure (key '" + key + "')");
    std::vector<std::byte> body{static_cast<std::byte>(op)};
    detail::put_u32(body, static_cast<std::uint32_t>(key.size()));
    for (char ch : key) body.push_back(static_cast<std::byte>(ch));
    body.insert(body.end(), arg.begin(), arg.end());
    const auto frame = detail::make_frame(body);
    std::size_t sent = 0;
    while (sent < frame.size()) {
      const ssize_t n = ::send(fd_.get(), frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("sending key '" + key + "' failed: " + detail::errno_text(errno));
      sent += static_cast<std::size_t>(n);
    }
    const auto deadline = deadline_after(wait);
    std::byte header[4];
    receive(header, 4, deadline, key);
    const auto length = static_cast<std::uint32_t>(detail::get_uint(header, 4));
    if (length < 1) fail("an empty reply for key '" + key + "'");
    if (length > detail::tcp_max_reply)  // before allocating: a forged length must not cost memory
      fail("the reply for key '" + key + "' claims " + std::to_string(length) + " bytes, over the " +
           std::to_string(detail::tcp_max_reply) + " a reply may take (a value of max_value_bytes = " +
           std::to_string(max_value_bytes) + " and its status byte): is another program listening there?");
    std::vector<std::byte> reply(length);
    receive(reply.data(), length, deadline, key);
    const auto status = static_cast<detail::tcp_status>(reply[0]);
    reply.erase(reply.begin());
    if (status == detail::tcp_status::error)
      throw error(errc::invalid_argument,
                  "rendezvous store at " + where() + ": " + std::string(reinterpret_cast<const char*>(reply.data()), reply.size()));
    return {status, std::move(reply)};
  }

  void receive(std::byte* out, std::size_t n, std::chrono::steady_clock::time_point deadline, const std::string& key) {
    while (n) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd_.get(), POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1 << 30)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        fd_.reset();  // a late reply would be taken for the next request's
        throw error(errc::timeout, "the rendezvous store at " + where() + " did not answer for key '" + key +
                                       "' within " + std::to_string(timeout_.count()) + " ms of its deadline");
      }
      const ssize_t k = ::recv(fd_.get(), out, n, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k == 0) fail("the server closed the connection while waiting for key '" + key + "' (has rank 0 exited?)");
      if (k < 0) fail("receiving key '" + key + "' failed: " + detail::errno_text(errno));
      out += k;
      n -= static_cast<std::size_t>(k);
    }
  }

  [[noreturn]] void fail(const std::string& what) {
    fd_.reset();
    throw error(errc::transport, "rendezvous store at " + where() + ": " + what);
  }

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<detail::tcp_server> server_;  // before fd_: our connection closes first
  std::mutex mutex_;
  detail::unique_fd fd_;
};

}  // namespace mimatrix::bootstrap
