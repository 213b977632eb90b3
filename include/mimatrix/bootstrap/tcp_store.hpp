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

#include "mimatrix/bootstrap/detail/fd.hpp"
#include "mimatrix/bootstrap/detail/tcp_protocol.hpp"
#include "mimatrix/bootstrap/detail/tcp_server.hpp"
#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/options.hpp"

namespace mimatrix::bootstrap {

/// A store served over TCP by the rank constructed with `serve` (rank 0), reached by
/// every rank through its own connection.
///
/// Rank 0 must keep its object alive until the other ranks are done with the store (end
/// the rendezvous with a barrier); destroying it stops the server, unless the server was
/// handed in (open_store's: rank 0's process serves the job's store until it exits).
///
/// @par Thread Safety
/// One object may be shared by threads: requests on it are serialized. Many processes and
/// objects may use one server.
class tcp_store final : public store {
 public:
  /// Connects to `host`:`port`, retrying until `timeout` (the serving rank may start
  /// later). With `serve`, first starts the server on `port` (0: one the kernel picks;
  /// port() says which) of `host`'s address alone, not every address of this host.
  /// Throws errc::transport naming the address and port when it cannot serve, and
  /// errc::transport naming the address and the last error when it cannot connect in time.
  tcp_store(std::string host, int port, bool serve, std::chrono::milliseconds timeout)
      : host_(std::move(host)), port_(port), timeout_(bounded_timeout(timeout)) {
    if (port < 0 || port > 65535)
      throw error(errc::invalid_argument, "rendezvous store port " + std::to_string(port) + " is not in [0, 65535]");
    if (serve) {
      server_ = std::make_shared<detail::tcp_server>(host_, port);
      port_ = server_->port();
    } else if (port == 0) {
      throw error(errc::invalid_argument, "cannot connect to a rendezvous store at tcp://" + host_ + ":0");
    }
    connect();
  }

  /// A client of `server`, which this process runs already; the server lives as long as
  /// any of its holders (open_store's: detail/job_server.hpp).
  tcp_store(std::string host, std::shared_ptr<detail::tcp_server> server, std::chrono::milliseconds timeout)
      : host_(std::move(host)), port_(server->port()), timeout_(bounded_timeout(timeout)), server_(std::move(server)) {
    connect();
  }

  tcp_store(const tcp_store&) = delete;
  tcp_store& operator=(const tcp_store&) = delete;

  /// Disarms what set_when_gone() armed: this process did not go without a word.
  ~tcp_store() override {
    try {
      if (armed_ && fd_) cancel_when_gone({}, std::chrono::milliseconds(1000));
    } catch (const error&) {  // the server is gone or frozen: nobody is left to mislead
    }
  }

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

  std::int64_t add(const std::string& key, std::int64_t delta) override { return add_within(key, delta, timeout_); }

  /// A frozen server (rank 0 stopped) costs at most `timeout`; the connection is then
  /// given up, as after any late reply.
  std::int64_t add_within(const std::string& key, std::int64_t delta, std::chrono::milliseconds timeout) override {
    std::vector<std::byte> arg;
    detail::put_u64(arg, static_cast<std::uint64_t>(delta));
    auto [status, value] = request(detail::tcp_op::add, key, arg, std::min(timeout, timeout_));
    if (value.size() != 8)
      throw error(errc::transport, "add to key '" + key + "' at " + where() + ": malformed reply");
    return static_cast<std::int64_t>(detail::get_uint(value.data(), 8));
  }

  std::int64_t erase_prefix(const std::string& prefix) override {
    auto [status, value] = request(detail::tcp_op::erase_prefix, prefix, {}, timeout_);
    if (value.size() != 8)
      throw error(errc::transport, "erase of keys under '" + prefix + "' at " + where() + ": malformed reply");
    return static_cast<std::int64_t>(detail::get_uint(value.data(), 8));
  }

  /// The server sets `key` when this object's connection ends without disarming it. A
  /// connection given up (a request that timed out, a malformed reply) is disarmed first.
  bool set_when_gone(const std::string& key, const std::vector<std::byte>& value) override {
    check_entry(key, value.size());
    std::vector<std::byte> arg{std::byte{1}};
    arg.insert(arg.end(), value.begin(), value.end());
    request(detail::tcp_op::when_gone, key, arg, timeout_);
    armed_ = true;
    return true;
  }

  void cancel_when_gone(const std::string& key, std::chrono::milliseconds timeout) override {
    if (!armed_) return;
    request(detail::tcp_op::when_gone, key, {std::byte{0}}, std::min(timeout, timeout_));
    if (key.empty()) armed_ = false;
  }

  std::string where() const override { return "tcp://" + host_ + ":" + std::to_string(port_); }

  /// The server's address: every client of it in this process shares its keys.
  std::string scope() const override { return where(); }

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
      answered_ = false;
      return true;
    }
    return false;
  }

  std::pair<detail::tcp_status, std::vector<std::byte>> request(detail::tcp_op op, const std::string& key,
                                                                 const std::vector<std::byte>& arg,
                                                                 std::chrono::milliseconds wait) {
    check_entry(key, op == detail::tcp_op::set ? arg.size() : 0);  // what the server would refuse
    std::lock_guard lock(mutex_);
    if (!fd_ && timed_out_) {
      // An earlier request timed out (a bounded wait, as a tear-down's): its reply may still
      // come on that connection, so this one takes a new one. The server is up.
      std::string why;
      if (!try_connect(deadline_after(timeout_), why))
        fail("connecting again after a request that timed out failed (key '" + key + "'): " + why);
    }
    if (!fd_)
      throw error(errc::transport, "the connection to the rendezvous store at " + where() +
                                       " was lost by an earlier failure (key '" + key + "')");
    timed_out_ = false;
    std::vector<std::byte> body{static_cast<std::byte>(op)};
    detail::put_u32(body, static_cast<std::uint32_t>(key.size()));
    for (char ch : key) body.push_back(static_cast<std::byte>(ch));
    body.insert(body.end(), arg.begin(), arg.end());
    const auto frame = detail::make_frame(body);
    const auto deadline = deadline_after(wait);
    waited_ = wait;
    std::byte header[4];
    // The server closes a connection that stayed silent since it opened (tcp_server_limits::
    // silent): if this is its first request, nothing of it was served; connect again, once.
    if (!exchange(frame, header, deadline, key, !answered_)) {
      fd_.reset();
      std::string why;
      if (!try_connect(deadline_after(timeout_), why))
        fail("the server closed the connection before answering key '" + key + "', and connecting again failed: " +
             why + " (has rank 0 exited?)");
      exchange(frame, header, deadline, key, false);
    }
    answered_ = true;
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
      throw error(errc::invalid_argument, "rendezvous store at " + where() + ": " + text_of(reply));
    return {status, std::move(reply)};
  }

  /// Sends `frame` and reads the reply's length prefix into `header`. False, when
  /// `may_retry`, if the server had closed the connection before it.
  bool exchange(const std::vector<std::byte>& frame, std::byte* header, std::chrono::steady_clock::time_point deadline,
                const std::string& key, bool may_retry) {
    std::size_t sent = 0;
    while (sent < frame.size()) {
      const ssize_t n = ::send(fd_.get(), frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 && may_retry && (errno == EPIPE || errno == ECONNRESET)) return false;
      if (n <= 0) fail("sending key '" + key + "' failed: " + detail::errno_text(errno));
      sent += static_cast<std::size_t>(n);
    }
    return receive(header, 4, deadline, key, may_retry);
  }

  bool receive(std::byte* out, std::size_t n, std::chrono::steady_clock::time_point deadline, const std::string& key,
               bool may_retry = false) {
    while (n) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd_.get(), POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1 << 30)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        drop_connection();  // a late reply would be taken for the next request's
        timed_out_ = true;
        throw error(errc::timeout, "the rendezvous store at " + where() + " did not answer for key '" + key +
                                       "' within " + std::to_string(waited_.count()) + " ms");
      }
      const ssize_t k = ::recv(fd_.get(), out, n, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0 && may_retry && (k == 0 || errno == ECONNRESET)) return false;
      if (k == 0) fail("the server closed the connection while waiting for key '" + key + "' (has rank 0 exited?)");
      if (k < 0) fail("receiving key '" + key + "' failed: " + detail::errno_text(errno));
      out += k;
      n -= static_cast<std::size_t>(k);
      may_retry = false;
    }
    return true;
  }

  /// Gives up the connection, first disarming its keys without waiting: the server reads
  /// a connection's frames in order, so it disarms them before it sees the end.
  void drop_connection() {
    if (fd_ && armed_) {
      std::vector<std::byte> body{static_cast<std::byte>(detail::tcp_op::when_gone)};
      detail::put_u32(body, 0);  // the empty key: every one
      body.push_back(std::byte{0});
      const auto frame = detail::make_frame(body);
      (void)!::send(fd_.get(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::shutdown(fd_.get(), SHUT_WR);
      std::byte unread[4096];  // closing with unread bytes would reset the connection
      while (::recv(fd_.get(), unread, sizeof unread, MSG_DONTWAIT) > 0) {
      }
    }
    armed_ = false;
    fd_.reset();
  }

  [[noreturn]] void fail(const std::string& what) {
    drop_connection();
    throw error(errc::transport, "rendezvous store at " + where() + ": " + what);
  }

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<detail::tcp_server> server_;  // before fd_: our connection closes first
  std::mutex mutex_;
  detail::unique_fd fd_;
  bool answered_ = false;  // the server has answered a request on fd_
  bool timed_out_ = false;  // fd_ was dropped because a request timed out: the next connects again
  bool armed_ = false;      // set_when_gone() armed keys on fd_
  std::chrono::milliseconds waited_{0};  // how long the request in flight may wait, for its message
};

}  // namespace mimatrix::bootstrap
