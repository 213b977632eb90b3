// The server of a tcp_store: a poll() loop on one thread over the listening socket, a
// wake-up pipe and every client connection. It owns the values; nothing else touches them.
// What its clients make it hold is bounded (tcp_server_limits), so that a broken or
// hostile client costs it neither unbounded memory nor a spinning core.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "mimatrix/bootstrap/detail/counter.hpp"
#include "mimatrix/bootstrap/detail/fd.hpp"
#include "mimatrix/bootstrap/detail/tcp_listener.hpp"
#include "mimatrix/bootstrap/detail/tcp_protocol.hpp"
#include "mimatrix/bootstrap/detail/tcp_server_limits.hpp"
#include "mimatrix/core/error.hpp"

namespace mimatrix::bootstrap::detail {

class tcp_server {
  using clock = std::chrono::steady_clock;

 public:
  /// Binds `port` (0: one the kernel picks) of `address` alone (listen_on); starts serving.
  tcp_server(const std::string& address, int port, tcp_server_limits limits = {}) : limits_(limits) {
    listen_ = listen_on(address, port);
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    ::getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    char host[NI_MAXHOST] = {};
    ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
    address_ = host;
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
  const std::string& address() const noexcept { return address_; }  // numeric: "127.0.0.1", "::1"

 private:
  using value_ptr = std::shared_ptr<const std::vector<std::byte>>;

  /// A reply: its prefix and status (with a counter or a message), then a get's value,
  /// shared with the store: a hundred gets of one value cost one copy of it.
  struct outgoing {
    std::vector<std::byte> head;
    value_ptr value;
    std::size_t bytes() const { return head.size() + (value ? value->size() : 0); }
  };
  struct client {
    unique_fd fd;
    std::byte prefix[4]{};
    std::size_t prefix_got = 0;
    std::vector<std::byte> body;  // the request being received, allocated once its length is known
    std::size_t body_length = 0, body_got = 0;
    bool discarding = false;  // the body of a refused request: read and dropped
    std::deque<outgoing> out;
    std::size_t out_sent = 0;  // of out.front()
    clock::time_point last_input;
    bool spoke = false;  // has sent a whole request
    bool closed = false;
    std::map<std::string, value_ptr> when_gone;  // set if the connection ends (tcp_op::when_gone)
  };
  struct waiter {
    std::uint64_t client;
    std::string key;
    clock::time_point deadline;
  };

  // A client that does not read its replies is not read from either: its requests wait in
  // its socket, not in our memory.
  static constexpr std::size_t max_queued_replies = 64;
  // What a parked get costs besides its key.
  static constexpr std::size_t waiter_bytes = sizeof(waiter);

  void run() {
    std::vector<pollfd> fds;
    std::vector<std::uint64_t> ids;
    for (;;) {
      auto now = clock::now();
      fds.clear();
      ids.clear();
      fds.push_back({wake_read_.get(), POLLIN, 0});
      fds.push_back({now >= accept_paused_until_ ? listen_.get() : -1, POLLIN, 0});  // -1: poll skips it
      for (auto& [id, c] : clients_) {
        const short in = c.out.size() < max_queued_replies ? POLLIN : 0;
        fds.push_back({c.fd.get(), static_cast<short>(in | (c.out.empty() ? 0 : POLLOUT)), 0});
        ids.push_back(id);
      }
      if (::poll(fds.data(), fds.size(), wait_ms(now)) < 0 && errno != EINTR) return;
      if (fds[0].revents) return drain();  // the destructor asks us to stop
      now = clock::now();
      if (fds[1].revents & POLLIN) accept_all(now);
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        auto it = clients_.find(ids[i - 2]);
        if (it == clients_.end()) continue;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) receive(it->first, it->second, now);
        if (fds[i].revents & POLLOUT) flush(it->second);
      }
      expire(now);
      for (auto it = clients_.begin(); it != clients_.end();) {
        if (!it->second.closed) { ++it; continue; }
        const std::uint64_t gone = it->first;
        for (auto w = waiters_.begin(); w != waiters_.end();) w = w->client == gone ? drop(w) : std::next(w);
        it = clients_.erase(it);
      }
      set_what_the_gone_left();
    }
  }

  /// Stopping: answers the requests that have arrived, and sends the replies queued, so
  /// that a client that asked before the server's owner left is answered, not reset.
  /// Ends as soon as nothing more has come and nothing is left to send, or at the limit.
  void drain() {
    const auto until = clock::now() + limits_.drain;
    std::vector<pollfd> fds;
    std::vector<std::uint64_t> ids;
    for (;;) {
      fds.clear();
      ids.clear();
      bool sending = false;
      for (auto& [id, c] : clients_) {
        if (c.closed) continue;
        sending = sending || !c.out.empty();
        fds.push_back({c.fd.get(), static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
        ids.push_back(id);
      }
      auto now = clock::now();
      if (fds.empty() || now >= until) return;
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - now).count();
      const int ready = ::poll(fds.data(), fds.size(), sending ? static_cast<int>(left) : 0);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return;
      now = clock::now();
      for (std::size_t i = 0; i < fds.size(); ++i) {
        client& c = clients_.at(ids[i]);
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) receive(ids[i], c, now);
        if (fds[i].revents & POLLOUT) flush(c);
      }
    }
  }

  /// Until the next thing with a deadline: a parked get, the end of an accept pause, a
  /// connection that may be silent or stalled too long (looked at once a second at most).
  int wait_ms(clock::time_point now) const {
    auto next = clock::time_point::max();
    for (const waiter& w : waiters_) next = std::min(next, w.deadline);
    if (now < accept_paused_until_) next = std::min(next, accept_paused_until_);
    for (const auto& [id, c] : clients_)
      if (!c.spoke || c.prefix_got) next = std::min(next, now + std::chrono::seconds(1));
    if (next == clock::time_point::max()) return -1;
    // A 49-day get must not wrap to "forever".
    return static_cast<int>(std::clamp<std::int64_t>(
        std::chrono::ceil<std::chrono::milliseconds>(next - now).count(), 0, 1 << 30));
  }

  void accept_all(clock::time_point now) {
    for (;;) {
      unique_fd fd(::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd) {
        // Out of descriptors the listening socket stays readable: back off rather than
        // spin, and make room by closing the connection silent longest, if a while.
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          accept_paused_until_ = now + limits_.accept_backoff;
          close_silent_longest(now);
        }
        return;  // else EAGAIN, or a connection that went away before we took it
      }
      const int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      client& c = clients_[next_id_++];
      c.fd = std::move(fd);
      c.last_input = now;
    }
  }

  void close_silent_longest(clock::time_point now) {
    client* oldest = nullptr;
    for (auto& [id, c] : clients_)
      if (!c.spoke && !c.prefix_got && !c.closed && (!oldest || c.last_input < oldest->last_input)) oldest = &c;
    // Not one that just opened: its first request may be on its way.
    const auto grace = std::min<clock::duration>(limits_.silent, std::chrono::seconds(1));
    if (oldest && now - oldest->last_input >= grace) close(*oldest);
  }

  /// Closes connections silent since they opened, and requests whose bytes stopped coming.
  void expire(clock::time_point now) {
    for (auto& [id, c] : clients_) {
      if (c.closed) continue;
      if ((!c.spoke && !c.prefix_got && now - c.last_input > limits_.silent) ||
          (c.prefix_got && now - c.last_input > limits_.stalled_request))
        close(c);
    }
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->deadline > now) { ++it; continue; }
      auto c = clients_.find(it->client);
      if (c != clients_.end()) reply(c->second, tcp_status::timeout);
      it = drop(it);
    }
  }

  /// Reads what has come, a frame's prefix, then its body into memory sized by the prefix:
  /// what a client makes us hold follows the lengths it declares, within the bounds.
  void receive(std::uint64_t id, client& c, clock::time_point now) {
    // A bounded number of reads a round: a client streaming without end must not hold the loop.
    for (int reads = 0; !c.closed && reads < 64 && c.out.size() < max_queued_replies; ++reads) {
      std::byte dropped[16 * 1024];
      std::byte* into = c.prefix + c.prefix_got;
      std::size_t want = 4 - c.prefix_got;
      if (c.prefix_got == 4) {
        into = c.discarding ? dropped : c.body.data() + c.body_got;
        want = c.discarding ? std::min(sizeof dropped, c.body_length - c.body_got) : c.body_length - c.body_got;
      }
      const ssize_t n = ::recv(c.fd.get(), into, want, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) return close(c);
      c.last_input = now;
      if (c.prefix_got < 4) {
        c.prefix_got += static_cast<std::size_t>(n);
        if (c.prefix_got == 4) begin_request(c);
        continue;
      }
      c.body_got += static_cast<std::size_t>(n);
      if (c.body_got == c.body_length) end_request(id, c);
    }
  }

  void begin_request(client& c) {
    const std::size_t length = get_uint(c.prefix, 4);
    if (length > tcp_max_request || length < 5) return close(c);  // not our protocol
    c.body_length = length;
    c.body_got = 0;
    if (buffered_ + length > limits_.buffered_bytes) {
      c.discarding = true;
      return refuse(c, "the store is busy: it holds " + std::to_string(buffered_) +
                           " bytes of requests, parked gets and armed keys of its clients, and this request's " +
                           std::to_string(length) + " would pass its bound of " +
                           std::to_string(limits_.buffered_bytes) + " bytes; retry later");
    }
    buffered_ += length;
    c.body.resize(length);
  }

  void end_request(std::uint64_t id, client& c) {
    c.prefix_got = 0;
    c.spoke = true;  // a whole request, even one refused: it is one of our clients
    if (std::exchange(c.discarding, false)) return;
    buffered_ -= c.body_length;
    handle(id, c);
    // A large body's memory goes back; a small one's is kept for the next request.
    if (c.body.capacity() > 64 * 1024) c.body = {};
  }

  void handle(std::uint64_t id, client& c) {
    const std::byte* body = c.body.data();
    const std::size_t length = c.body_length;
    const auto op = static_cast<tcp_op>(body[0]);
    const auto key_length = get_uint(body + 1, 4);
    if (key_length > length - 5) return close(c);
    if (key_length > max_key_bytes)
      return refuse(c, "a key of " + std::to_string(key_length) + " bytes is over the " +
                           std::to_string(max_key_bytes) + " bytes a key may take");
    std::string key(reinterpret_cast<const char*>(body + 5), key_length);
    const std::byte* rest = body + 5 + key_length;
    const std::size_t rest_length = length - 5 - key_length;
    switch (op) {
      case tcp_op::set: {
        if (rest_length > max_value_bytes)
          return refuse(c, "the value of key '" + key + "' (" + std::to_string(rest_length) + " bytes) is over the " +
                               std::to_string(max_value_bytes) + " bytes a value may take");
        if (!room_to_store(c, key, rest_length)) return;
        // The body becomes the value: a second copy of a large one would double what it costs.
        c.body.erase(c.body.begin(), c.body.begin() + static_cast<std::ptrdiff_t>(5 + key_length));
        store(key, std::make_shared<const std::vector<std::byte>>(std::move(c.body)));
        c.body = {};
        reply(c, tcp_status::ok);
        return wake(key);
      }
      case tcp_op::get: {
        if (rest_length != 4) return close(c);
        if (auto found = values_.find(key); found != values_.end()) return reply(c, found->second);
        if (buffered_ + key.size() + waiter_bytes > limits_.buffered_bytes)
          return refuse(c, "the store is busy: " + std::to_string(waiters_.size()) +
                               " gets wait for keys not set yet, and with the requests being received they hold " +
                               std::to_string(buffered_) + " of its bound of " +
                               std::to_string(limits_.buffered_bytes) + " bytes; retry later");
        buffered_ += key.size() + waiter_bytes;
        const auto wait = std::chrono::milliseconds(get_uint(rest, 4));
        waiters_.push_back({id, std::move(key), clock::now() + wait});
        return;
      }
      case tcp_op::add: {
        if (rest_length != 8) return close(c);
        std::int64_t now = 0;
        if (auto found = values_.find(key); found != values_.end() && !parse_counter(*found->second, now))
          return refuse(c, "key '" + key + "' holds a value that is not a counter");
        now = static_cast<std::int64_t>(static_cast<std::uint64_t>(now) + get_uint(rest, 8));
        auto value = std::make_shared<const std::vector<std::byte>>(counter_bytes(now));
        if (!room_to_store(c, key, value->size())) return;
        store(key, std::move(value));
        reply_count(c, now);
        return wake(key);
      }
      case tcp_op::when_gone:
        if (rest_length < 1) return close(c);
        return when_gone(c, key, rest, rest_length);
      case tcp_op::erase_prefix: {
        if (rest_length != 0) return close(c);
        std::int64_t erased = 0;
        for (auto it = values_.lower_bound(key); it != values_.end() && it->first.starts_with(key); ++erased) {
          stored_ -= it->first.size() + it->second->size();
          it = values_.erase(it);
        }
        return reply_count(c, erased);
      }
    }
    close(c);  // an unknown operation: not one of our clients
  }

  /// Arms (`rest[0]` 1, the value after it) or disarms (0; an empty key: all) what the
  /// connection's end sets: a client killed, or its host lost, tells those waiting for it.
  /// Armed keys count as buffered until set or disarmed; one fits, as its request did.
  void when_gone(client& c, const std::string& key, const std::byte* rest, std::size_t rest_length) {
    const auto forget = [&](std::map<std::string, value_ptr>::iterator it) {
      buffered_ -= it->first.size() + it->second->size();
      return c.when_gone.erase(it);
    };
    auto found = c.when_gone.find(key);
    if (rest[0] == std::byte{0}) {
      if (key.empty())
        for (auto it = c.when_gone.begin(); it != c.when_gone.end();) it = forget(it);
      else if (found != c.when_gone.end())
        forget(found);
      return reply(c, tcp_status::ok);
    }
    if (found != c.when_gone.end()) forget(found);
    buffered_ += key.size() + rest_length - 1;
    c.when_gone[key] = std::make_shared<const std::vector<std::byte>>(rest + 1, rest + rest_length);
    reply(c, tcp_status::ok);
  }

  /// Sets what closed connections left armed. Not from close(): a set wakes gets, whose
  /// replies may close other connections.
  void set_what_the_gone_left() {
    while (!gone_.empty()) {
      auto [key, value] = std::move(gone_.front());
      gone_.pop_front();
      const auto found = values_.find(key);
      const std::size_t old = found == values_.end() ? 0 : key.size() + found->second->size();
      if (stored_ - old + key.size() + value->size() > limits_.stored_bytes) continue;  // the deadline decides
      store(key, std::move(value));
      wake(key);
    }
  }

  /// Whether `key` may hold `bytes` within limits_.stored_bytes; if not, tells the client.
  bool room_to_store(client& c, const std::string& key, std::size_t bytes) {
    const auto found = values_.find(key);
    const std::size_t old = found == values_.end() ? 0 : key.size() + found->second->size();
    if (stored_ - old + key.size() + bytes <= limits_.stored_bytes) return true;
    refuse(c, "the store holds " + std::to_string(stored_) + " bytes of keys and values, and key '" + key + "' (" +
                  std::to_string(bytes) + " bytes) would pass its bound of " + std::to_string(limits_.stored_bytes) +
                  " bytes");
    return false;
  }

  void store(const std::string& key, value_ptr value) {
    value_ptr& slot = values_[key];
    stored_ -= slot ? key.size() + slot->size() : 0;
    stored_ += key.size() + value->size();
    slot = std::move(value);
  }

  void refuse(client& c, const std::string& why) {
    reply(c, tcp_status::error, reinterpret_cast<const std::byte*>(why.data()), why.size());
  }

  void wake(const std::string& key) {
    const value_ptr& value = values_[key];
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->key != key) { ++it; continue; }
      auto c = clients_.find(it->client);
      if (c != clients_.end()) reply(c->second, value);
      it = drop(it);
    }
  }

  std::vector<waiter>::iterator drop(std::vector<waiter>::iterator it) {
    buffered_ -= it->key.size() + waiter_bytes;
    return waiters_.erase(it);
  }

  void reply(client& c, tcp_status status, const std::byte* data = nullptr, std::size_t n = 0) {
    c.out.push_back({reply_head(status, 0, data, n), nullptr});
    flush(c);
  }
  void reply_count(client& c, std::int64_t n) {
    const auto bytes = u64_bytes(static_cast<std::uint64_t>(n));
    reply(c, tcp_status::ok, bytes.data(), bytes.size());
  }
  void reply(client& c, const value_ptr& value) {
    c.out.push_back({reply_head(tcp_status::ok, value->size()), value});
    flush(c);
  }

  void flush(client& c) {
    while (!c.out.empty() && !c.closed) {
      const outgoing& o = c.out.front();
      iovec parts[2];
      int count = 0;
      std::size_t at = c.out_sent;
      if (at < o.head.size()) {
        parts[count++] = {const_cast<std::byte*>(o.head.data()) + at, o.head.size() - at};
        at = 0;
      } else {
        at -= o.head.size();
      }
      if (o.value && at < o.value->size())
        parts[count++] = {const_cast<std::byte*>(o.value->data()) + at, o.value->size() - at};
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = static_cast<std::size_t>(count);
      const ssize_t n = ::sendmsg(c.fd.get(), &message, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // POLLOUT resumes it
      if (n <= 0) return close(c);
      c.out_sent += static_cast<std::size_t>(n);
      if (c.out_sent == o.bytes()) {
        c.out.pop_front();
        c.out_sent = 0;
      }
    }
  }

  /// Ends a connection and gives back what it held (its parked gets go in run()).
  void close(client& c) {
    if (c.closed) return;
    c.closed = true;
    if (c.prefix_got == 4 && !c.discarding) buffered_ -= c.body_length;
    c.prefix_got = 0;
    c.body = {};
    c.out.clear();
    c.fd.reset();  // now: a descriptor is what a flood of connections runs out of
    for (auto& [key, value] : c.when_gone) {
      buffered_ -= key.size() + value->size();
      gone_.emplace_back(key, std::move(value));
    }
    c.when_gone.clear();
  }

  tcp_server_limits limits_;
  unique_fd listen_, wake_read_, wake_write_;
  int port_ = 0;
  std::string address_;
  // Touched by the server thread alone once it runs.
  std::map<std::uint64_t, client> clients_;
  std::vector<waiter> waiters_;
  std::map<std::string, value_ptr> values_;
  std::deque<std::pair<std::string, value_ptr>> gone_;  // armed by connections closed this round
  std::size_t buffered_ = 0;  // bodies being received, parked gets' keys, armed keys (limits_.buffered_bytes)
  std::size_t stored_ = 0;    // keys and values (limits_.stored_bytes)
  clock::time_point accept_paused_until_{};
  std::uint64_t next_id_ = 0;
  std::thread thread_;  // last: starts after every member above exists
};

}  // namespace mimatrix::bootstrap::detail
