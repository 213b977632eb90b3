// Tests of store::set_when_gone over tcp: the server sets what a connection armed when the
// connection ends without disarming it (a killed client: its kernel closes the socket),
// wakes a get waiting for it, and sets nothing for a client that ends or disarms; what
// clients arm is bounded as their requests are.
#include "mimatrix/bootstrap/tcp_store.hpp"

#include <gtest/gtest.h>

#include "support/bytes.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mimatrix/bootstrap/memory_store.hpp"

namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using mimatrix::errc;
using mimatrix::bootstrap::tcp_store;
using mimatrix::bootstrap::detail::tcp_op;
using mimatrix::bootstrap::detail::tcp_status;
using mimatrix::test::bytes;
using mimatrix::test::text;

/// A client speaking the protocol by hand, which can end its connection without a word,
/// as the kernel of a killed process does.
class raw_client {
 public:
  explicit raw_client(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  raw_client(const raw_client&) = delete;
  raw_client& operator=(const raw_client&) = delete;
  ~raw_client() { vanish(); }

  bool connected() const { return connected_; }

  /// Arms (`value`) or disarms (none) `key`; the reply's status.
  tcp_status when_gone(const std::string& key, const std::string* value = nullptr) {
    std::vector<std::byte> body{static_cast<std::byte>(tcp_op::when_gone)};
    mimatrix::bootstrap::detail::put_u32(body, static_cast<std::uint32_t>(key.size()));
    for (char c : key) body.push_back(static_cast<std::byte>(c));
    body.push_back(std::byte{value ? std::uint8_t{1} : std::uint8_t{0}});
    if (value)
      for (char c : *value) body.push_back(static_cast<std::byte>(c));
    const auto frame = mimatrix::bootstrap::detail::make_frame(body);
    if (::send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(frame.size()))
      return tcp_status::error;
    std::byte head[5];
    std::size_t got = 0;
    while (got < sizeof head) {
      const ssize_t n = ::recv(fd_, head + got, sizeof head - got, 0);
      if (n <= 0) return tcp_status::error;
      got += static_cast<std::size_t>(n);
    }
    std::vector<std::byte> rest(mimatrix::bootstrap::detail::get_uint(head, 4) - 1);
    for (std::size_t at = 0; at < rest.size();) {
      const ssize_t n = ::recv(fd_, rest.data() + at, rest.size() - at, 0);
      if (n <= 0) return tcp_status::error;
      at += static_cast<std::size_t>(n);
    }
    return static_cast<tcp_status>(head[4]);
  }

  /// Ends the connection without disarming anything.
  void vanish() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  bool connected_ = false;
};

void expect_unset(tcp_store& s, const std::string& key) {
  try {
    s.get(key, 200ms);
    ADD_FAILURE() << "key '" << key << "' was set";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::timeout) << e.what();
  }
}

TEST(when_gone, a_connection_that_ends_without_a_word_sets_what_it_armed_and_wakes_its_waiters) {
  tcp_store server("127.0.0.1", 0, true, 2s);
  raw_client client(server.port());
  ASSERT_TRUE(client.connected());
  const std::string gone = "rank 1 is gone", other = "not this";
  ASSERT_EQ(client.when_gone("lost/1", &gone), tcp_status::ok);
  ASSERT_EQ(client.when_gone("lost/2", &other), tcp_status::ok);
  ASSERT_EQ(client.when_gone("lost/2"), tcp_status::ok);  // disarmed
  expect_unset(server, "lost/1");                          // armed only
  std::string seen;
  std::thread waiting([&, port = server.port()] {
    tcp_store peer("127.0.0.1", port, false, 2s);
    seen = text(peer.get("lost/1", 5s));
  });
  std::this_thread::sleep_for(50ms);
  const auto start = std::chrono::steady_clock::now();
  client.vanish();
  waiting.join();
  EXPECT_EQ(seen, gone);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  expect_unset(server, "lost/2");
}

TEST(when_gone, a_client_that_ends_or_disarms_everything_leaves_nothing) {
  tcp_store server("127.0.0.1", 0, true, 2s);
  {
    tcp_store client("127.0.0.1", server.port(), false, 2s);
    EXPECT_TRUE(client.set_when_gone("lost/a", bytes("a")));
  }  // ends with a word: its destructor disarms
  raw_client raw(server.port());
  const std::string value = "x";
  ASSERT_EQ(raw.when_gone("lost/b", &value), tcp_status::ok);
  ASSERT_EQ(raw.when_gone("lost/c", &value), tcp_status::ok);
  ASSERT_EQ(raw.when_gone(""), tcp_status::ok);  // the empty key: every one
  raw.vanish();
  std::this_thread::sleep_for(50ms);
  for (const char* key : {"lost/a", "lost/b", "lost/c"}) expect_unset(server, key);
  tcp_store cancelling("127.0.0.1", server.port(), false, 2s);
  cancelling.set_when_gone("lost/d", bytes("d"));
  cancelling.cancel_when_gone("lost/d", 1s);
  cancelling.set("still", bytes("serving"));
  EXPECT_EQ(text(server.get("still", 1s)), "serving");
}

TEST(when_gone, what_clients_arm_is_bounded_by_the_servers_buffered_bytes) {
  mimatrix::bootstrap::detail::tcp_server_limits limits;
  limits.buffered_bytes = 4096;
  auto served = std::make_shared<mimatrix::bootstrap::detail::tcp_server>("127.0.0.1", 0, limits);
  tcp_store client("127.0.0.1", served, 2s);
  try {
    client.set_when_gone("lost/0", std::vector<std::byte>(8000));
    FAIL() << "armed 8000 bytes under a bound of 4096";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("would pass its bound of 4096 bytes"), std::string::npos) << e.what();
  }
  // What is armed stays counted: 3 of 4 KiB armed, a 2 KiB request is refused.
  EXPECT_TRUE(client.set_when_gone("lost/0", std::vector<std::byte>(3000)));
  EXPECT_THROW(client.set("next", std::vector<std::byte>(2000)), mimatrix::error);
  client.cancel_when_gone("lost/0", 1s);  // given back
  client.set("next", std::vector<std::byte>(2000));
  EXPECT_EQ(client.get("next", 1s).size(), 2000u);
}

TEST(when_gone, a_store_without_connections_says_it_cannot_tell) {
  mimatrix::bootstrap::memory_store s;
  EXPECT_FALSE(s.set_when_gone("lost/0", bytes("gone")));
  s.cancel_when_gone("lost/0", 1s);  // nothing to withdraw: no error
}

}  // namespace MIMATRIX_UNIT_ID
