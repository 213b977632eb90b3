// Tests of bootstrap/tcp_store.hpp: many clients at once, a get that waits for a later set,
// the messages for a key that never comes, a store nobody serves and a port in use, and the
// bounds on values and replies (a forged reply length must not cost the client memory).
#include "mimatrix/bootstrap/tcp_store.hpp"

#include <gtest/gtest.h>

#include "support/bytes.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using mimatrix::errc;
using mimatrix::bootstrap::tcp_store;

using mimatrix::test::bytes;
using mimatrix::test::text;

/// A port that nobody listens on now (the kernel's pick, released).
int unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(tcp_store, set_get_add_from_one_client) {
  tcp_store s("127.0.0.1", 0, true, 2s);
  EXPECT_GT(s.port(), 0);
  EXPECT_EQ(s.where(), "tcp://127.0.0.1:" + std::to_string(s.port()));
  s.set("a", bytes("hello"));
  EXPECT_EQ(text(s.get("a", 1s)), "hello");
  s.set("a", bytes("replaced"));
  EXPECT_EQ(text(s.get("a", 0ms)), "replaced");
  s.set("empty", {});
  EXPECT_TRUE(s.get("empty", 0ms).empty());
  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -2), 3);
  EXPECT_EQ(text(s.get("n", 0ms)), "3");  // counters read as decimal text
  std::vector<std::byte> big(1 << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>(i * 7);
  s.set("big", big);
  EXPECT_EQ(s.get("big", 1s), big);
}

TEST(tcp_store, many_clients_at_once) {
  tcp_store server("127.0.0.1", 0, true, 2s);
  constexpr int clients = 8, rounds = 50;
  std::vector<std::thread> threads;
  std::vector<std::string> problems(clients);
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      tcp_store s("localhost", server.port(), false, 2s);
      for (int i = 0; i < rounds; ++i) {
        s.add("counter", 1);
        s.set("key/" + std::to_string(c) + "/" + std::to_string(i), bytes(std::to_string(c * 1000 + i)));
      }
      // Every other client's last key, which may not be set yet: get waits for it.
      for (int other = 0; other < clients; ++other) {
        const auto v = text(s.get("key/" + std::to_string(other) + "/" + std::to_string(rounds - 1), 2s));
        if (v != std::to_string(other * 1000 + rounds - 1)) problems[c] += "client " + std::to_string(other) + " " + v;
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& p : problems) EXPECT_EQ(p, "");
  EXPECT_EQ(server.add("counter", 0), clients * rounds);
}

TEST(tcp_store, get_waits_for_a_later_set) {
  tcp_store server("127.0.0.1", 0, true, 2s);
  tcp_store other("127.0.0.1", server.port(), false, 2s);
  const auto start = std::chrono::steady_clock::now();
  std::thread late([&] {
    std::this_thread::sleep_for(100ms);
    other.set("late", bytes("here"));
  });
  EXPECT_EQ(text(server.get("late", 2s)), "here");
  late.join();
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 90ms);
  EXPECT_LT(waited, 1500ms);
}

TEST(tcp_store, get_of_a_key_never_set_times_out_naming_it) {
  tcp_store s("127.0.0.1", 0, true, 2s);
  const auto start = std::chrono::steady_clock::now();
  try {
    s.get("never", 150ms);
    FAIL() << "nothing thrown";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::timeout);
    const std::string m = e.what();
    EXPECT_NE(m.find("'never'"), std::string::npos) << m;
    EXPECT_NE(m.find(s.where()), std::string::npos) << m;
    EXPECT_NE(m.find("150 ms"), std::string::npos) << m;
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 140ms);
  EXPECT_LT(waited, 1500ms);
  // The connection is still good after a timeout.
  s.set("after", bytes("x"));
  EXPECT_EQ(text(s.get("after", 0ms)), "x");
}

TEST(tcp_store, a_client_may_start_before_the_server) {
  const int port = unused_port();
  std::vector<std::byte> seen;
  std::thread client([&] {
    tcp_store s("127.0.0.1", port, false, 2s);
    seen = s.get("ready", 2s);
  });
  std::this_thread::sleep_for(150ms);
  tcp_store server("127.0.0.1", port, true, 2s);
  server.set("ready", bytes("yes"));
  client.join();
  EXPECT_EQ(text(seen), "yes");
}

TEST(tcp_store, an_unreachable_store_fails_within_the_timeout_naming_the_address) {
  const int port = unused_port();
  const auto start = std::chrono::steady_clock::now();
  try {
    tcp_store s("127.0.0.1", port, false, 300ms);
    FAIL() << "connected to a port nobody listens on";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::transport);
    const std::string m = e.what();
    EXPECT_NE(m.find("tcp://127.0.0.1:" + std::to_string(port)), std::string::npos) << m;
    EXPECT_NE(m.find("within 300 ms"), std::string::npos) << m;
    EXPECT_NE(m.find("Connection refused"), std::string::npos) << m;
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 290ms);
  EXPECT_LT(waited, 1500ms);
}

TEST(tcp_store, a_port_in_use_is_named) {
  tcp_store first("127.0.0.1", 0, true, 1s);
  try {
    tcp_store second("127.0.0.1", first.port(), true, 1s);
    FAIL() << "two servers on one port";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::transport);
    const std::string m = e.what();
    EXPECT_NE(m.find("port " + std::to_string(first.port())), std::string::npos) << m;
    EXPECT_NE(m.find("in use"), std::string::npos) << m;
  }
  // The first one is unharmed.
  first.set("k", bytes("v"));
  EXPECT_EQ(text(first.get("k", 0ms)), "v");
}

TEST(tcp_store, add_to_a_value_that_is_not_a_counter_fails) {
  tcp_store s("127.0.0.1", 0, true, 1s);
  s.set("word", bytes("hello"));
  try {
    s.add("word", 1);
    FAIL() << "added to text";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("'word'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.add("other", 2), 2);  // still usable
}

TEST(tcp_store, a_client_sees_the_server_go) {
  auto server = std::make_unique<tcp_store>("127.0.0.1", 0, true, 1s);
  tcp_store client("127.0.0.1", server->port(), false, 1s);
  client.set("k", bytes("v"));
  server.reset();
  try {
    client.get("k2", 1s);
    FAIL() << "the server is gone";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::transport);
    EXPECT_NE(std::string(e.what()).find(client.where()), std::string::npos) << e.what();
  }
}

TEST(tcp_store, add_within_gives_up_on_a_frozen_server_in_time) {
  // A stopped rank 0's server: connections complete in the kernel, nothing answers.
  const int frozen = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(frozen, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(frozen, 4), 0);
  ::getsockname(frozen, reinterpret_cast<sockaddr*>(&a), &len);
  tcp_store s("127.0.0.1", ntohs(a.sin_port), false, 10s);
  const auto start = std::chrono::steady_clock::now();
  try {
    s.add_within("goodbye", 1, 300ms);
    FAIL() << "a frozen server answered";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::timeout);
    EXPECT_NE(std::string(e.what()).find("did not answer for key 'goodbye' within 300 ms"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << "waited on the store's own 10 s timeout";
  ::close(frozen);
}

TEST(tcp_store, the_server_stops_with_waiting_clients) {
  // A get blocked in the server must not keep the destructor from returning.
  auto server = std::make_unique<tcp_store>("127.0.0.1", 0, true, 1s);
  std::thread waiting([port = server->port()] {
    tcp_store client("127.0.0.1", port, false, 1s);
    try {
      client.get("never", 1500ms);
    } catch (const mimatrix::error&) {
    }
  });
  std::this_thread::sleep_for(50ms);
  const auto start = std::chrono::steady_clock::now();
  server.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 500ms);
  waiting.join();
}

/// A fake store on loopback: accepts one client, reads its first request, answers with
/// `reply` (raw bytes, length prefix included), then holds the connection until the client
/// closes it or a few seconds pass.
class forged_server {
 public:
  explicit forged_server(std::vector<std::byte> reply) {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(listen_, 1);
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, reply = std::move(reply)] {
      const int fd = ::accept(listen_, nullptr, nullptr);
      if (fd < 0) return;
      std::byte request[4096];
      (void)!::recv(fd, request, sizeof request, 0);
      (void)!::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
      pollfd p{fd, POLLIN, 0};
      while (::poll(&p, 1, 3000) > 0 && ::recv(fd, request, sizeof request, 0) > 0) {
      }
      ::close(fd);
    });
  }
  ~forged_server() {
    thread_.join();
    ::close(listen_);
  }
  int port() const { return port_; }

 private:
  int listen_ = -1;
  int port_ = 0;
  std::thread thread_;
};

/// This process's peak resident memory, in bytes.
long long peak_rss() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<long long>(usage.ru_maxrss) * 1024;
}

TEST(tcp_store, a_forged_reply_length_fails_naming_the_store_and_the_length_without_allocating) {
  using mimatrix::bootstrap::detail::tcp_max_reply;
  for (const std::uint64_t forged : {std::uint64_t{1} << 30, std::uint64_t{tcp_max_reply} + 1, std::uint64_t{0xffffffff}}) {
    std::vector<std::byte> header;
    mimatrix::bootstrap::detail::put_u32(header, static_cast<std::uint32_t>(forged));
    header.push_back(std::byte{0});  // a status byte, and nothing of the claimed rest
    forged_server fake(header);
    const long long rss_before = peak_rss();
    const auto start = std::chrono::steady_clock::now();
    {
      tcp_store s("127.0.0.1", fake.port(), false, 2s);
      try {
        s.get("k", 1s);
        FAIL() << "accepted a reply of " << forged << " bytes";
      } catch (const mimatrix::error& e) {
        EXPECT_EQ(e.code(), errc::transport);
        const std::string m = e.what();
        EXPECT_NE(m.find("tcp://127.0.0.1:" + std::to_string(fake.port())), std::string::npos) << m;
        EXPECT_NE(m.find("claims " + std::to_string(forged) + " bytes"), std::string::npos) << m;
        EXPECT_NE(m.find("'k'"), std::string::npos) << m;
      }
    }  // closing the client ends the fake server's wait
    EXPECT_LT(std::chrono::steady_clock::now() - start, 900ms) << "waited for a body it should have refused";
    EXPECT_LT(peak_rss() - rss_before, 64ll << 20) << "a forged length of " << forged << " cost memory";
  }
}

TEST(tcp_store, the_server_refuses_a_value_over_the_bound_and_goes_on_serving) {
  // The client refuses it first (store_test); a client that does not check meets the server's
  // own bound: an error reply, nothing stored.
  using mimatrix::bootstrap::max_value_bytes;
  tcp_store s("127.0.0.1", 0, true, 2s);
  const std::vector<std::byte> largest(max_value_bytes, std::byte{7});
  s.set("largest", largest);  // the bound itself passes both ends, and so does its reply
  EXPECT_EQ(s.get("largest", 0ms), largest);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(s.port()));
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  std::vector<std::byte> body{static_cast<std::byte>(mimatrix::bootstrap::detail::tcp_op::set)};
  mimatrix::bootstrap::detail::put_u32(body, 1);
  body.push_back(std::byte{'x'});
  body.resize(body.size() + max_value_bytes + 1);
  const auto frame = mimatrix::bootstrap::detail::make_frame(body);
  std::size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = ::send(fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    sent += static_cast<std::size_t>(n);
  }
  // The reply frame: its 4-byte length, a status byte, the message.
  std::string reply;
  char buffer[1024];
  const auto complete = [&] {
    return reply.size() >= 4 &&
           reply.size() >= 4 + mimatrix::bootstrap::detail::get_uint(reinterpret_cast<const std::byte*>(reply.data()), 4);
  };
  while (!complete()) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    ASSERT_GT(n, 0) << "the server closed instead of answering";
    reply.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  EXPECT_EQ(static_cast<mimatrix::bootstrap::detail::tcp_status>(reply[4]), mimatrix::bootstrap::detail::tcp_status::error);
  EXPECT_NE(reply.find("'x' (" + std::to_string(max_value_bytes + 1) + " bytes) is over"), std::string::npos) << reply;
  EXPECT_THROW(s.get("x", 0ms), mimatrix::error);  // not stored
  s.set("after", bytes("fine"));
  EXPECT_EQ(text(s.get("after", 0ms)), "fine");
}

}  // namespace
