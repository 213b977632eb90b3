// Tests of bootstrap/detail/tcp_server.hpp under broken and hostile clients: what they make
// the server hold stays within its bounds, out of descriptors it backs off instead of
// spinning, and silent or stalled connections are closed. Memory and CPU are the server
// process's own accounting (a child process serves), never timings.
#include "mimatrix/bootstrap/detail/tcp_server.hpp"

#include <gtest/gtest.h>
#include <malloc.h>

#include "mimatrix/bootstrap/tcp_store.hpp"
#include "support/bytes.hpp"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
namespace detail = mimatrix::bootstrap::detail;
using detail::tcp_server_limits;
using mimatrix::bootstrap::max_value_bytes;
using mimatrix::bootstrap::tcp_store;

// A sanitizer's shadow memory, quarantine and slowdown count in the process's accounting:
// the bounds are asserted without one (the behaviour is checked either way).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool accounted = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool accounted = false;
#else
constexpr bool accounted = true;
#endif
#else
constexpr bool accounted = true;
#endif

/// A kB figure from /proc/self/status ("VmRSS", "VmHWM").
long long status_kb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  return -1;
}

/// A tcp_server in a child process, with `limits` and at most `files` descriptors (0: as
/// inherited). stop() returns what serving cost the child, from its own accounting.
class server_process {
 public:
  struct cost {
    long long memory_bytes;  // peak resident memory over what it had when it began serving
    double cpu_seconds;      // user and system time
  };

  explicit server_process(tcp_server_limits limits, rlim_t files = 0) {
    int up[2], down[2];
    if (::pipe(up) != 0 || ::pipe(down) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(up[0]);
      ::close(down[1]);
      if (files) {
        const rlimit r{files, files};
        ::setrlimit(RLIMIT_NOFILE, &r);
      }
      // The bounds under test are the server's; glibc's own slack is not. Its mmap threshold
      // rises to the size of each large block freed (up to 32 MiB), after which 16 MiB values
      // come from arenas that keep their pages: one CI run read 96 MiB against the 88 the
      // bounds allow. A fixed threshold keeps every large value mmapped and given back.
      ::mallopt(M_MMAP_THRESHOLD, 256 * 1024);
      std::ofstream("/proc/self/clear_refs") << "5";  // the peak (VmHWM) restarts from now
      const long long start_kb = status_kb("VmRSS");
      long long report[3] = {0, 0, 0};
      {
        detail::tcp_server server("127.0.0.1", 0, limits);
        report[0] = server.port();
        (void)!::write(up[1], report, sizeof report[0]);
        char stop;
        (void)!::read(down[0], &stop, 1);
        rusage usage{};
        ::getrusage(RUSAGE_SELF, &usage);
        report[1] = (status_kb("VmHWM") - start_kb) * 1024;
        report[2] = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000 + usage.ru_utime.tv_usec +
                    usage.ru_stime.tv_usec;
      }
      (void)!::write(up[1], report + 1, 2 * sizeof report[0]);
      ::_exit(0);
    }
    ::close(up[1]);
    ::close(down[0]);
    from_ = up[0];
    to_ = down[1];
    long long port = 0;
    if (::read(from_, &port, sizeof port) != sizeof port) throw std::runtime_error("the server process died");
    port_ = static_cast<int>(port);
  }
  ~server_process() {
    if (pid_ > 0) (void)stop();
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }

  cost stop() {
    const char go = 1;
    ::signal(SIGPIPE, SIG_IGN);  // a dead server must fail the test, not kill it
    (void)!::write(to_, &go, 1);
    long long report[2] = {-1, -1};
    const bool read_all = ::read(from_, report, sizeof report) == sizeof report;
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    ::close(from_);
    ::close(to_);
    if (!read_all) throw std::runtime_error("the server process died before reporting");
    return {report[0], double(report[1]) / 1e6};
  }

 private:
  pid_t pid_ = -1;
  int from_ = -1, to_ = -1, port_ = 0;
};

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Sends all of `data`; false once the server closed the connection.
bool send_all(int fd, const std::byte* data, std::size_t n) {
  while (n) {
    const ssize_t k = ::send(fd, data, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    data += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

/// A request frame's first bytes: its length prefix (as declared), the op and the key.
std::vector<std::byte> request_head(detail::tcp_op op, const std::string& key, std::size_t rest) {
  std::vector<std::byte> head;
  detail::put_u32(head, static_cast<std::uint32_t>(1 + 4 + key.size() + rest));
  head.push_back(static_cast<std::byte>(op));
  detail::put_u32(head, static_cast<std::uint32_t>(key.size()));
  for (char ch : key) head.push_back(static_cast<std::byte>(ch));
  return head;
}

/// Whether the server closed `fd` within `limit` (reading and dropping what it sent).
bool closed_within(int fd, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  char buffer[4096];
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0 && ::recv(fd, buffer, sizeof buffer, 0) <= 0) return true;
  }
  return false;
}

TEST(tcp_server, clients_streaming_values_cannot_make_it_hold_more_than_its_bounds) {
  tcp_server_limits limits;
  limits.buffered_bytes = 32 << 20;
  limits.stored_bytes = 32 << 20;
  server_process server(limits);
  // Two clients stream 192 MiB values (over max_value_bytes: dropped at the length prefix),
  // four others 16 MiB ones, three each, all at once: 432 MiB sent in all.
  std::vector<std::thread> clients;
  std::atomic<int> refused{0}, stored{0};
  for (int c = 0; c < 6; ++c)
    clients.emplace_back([&, c] {
      const std::size_t value = c < 2 ? std::size_t{192} << 20 : max_value_bytes;
      const std::vector<std::byte> chunk(1 << 20, std::byte{1});
      for (int round = 0; round < 3; ++round) {
        const int fd = connect_to(server.port());
        auto head = request_head(detail::tcp_op::set, "key" + std::to_string(c), value);
        bool open = send_all(fd, head.data(), head.size());
        for (std::size_t sent = 0; open && sent < value; sent += chunk.size())
          open = send_all(fd, chunk.data(), std::min(chunk.size(), value - sent));
        std::byte reply[512];
        const ssize_t n = open ? ::recv(fd, reply, sizeof reply, 0) : 0;
        if (n >= 5 && reply[4] == static_cast<std::byte>(detail::tcp_status::ok)) ++stored;
        if (n >= 5 && reply[4] == static_cast<std::byte>(detail::tcp_status::error)) ++refused;
        ::close(fd);
      }
    });
  for (auto& t : clients) t.join();
  // The server still serves, and answers within its bounds.
  {
    tcp_store s("127.0.0.1", server.port(), false, 5s);
    s.set("after", mimatrix::test::bytes("fine"));
    EXPECT_EQ(mimatrix::test::text(s.get("after", 0ms)), "fine");
  }
  const auto cost = server.stop();
  EXPECT_GT(stored.load(), 0);
  EXPECT_GT(refused.load(), 0) << "32 MiB of stored values cannot take four 16 MiB values";
  // Buffered and stored bounds, and one value's copy in flight between them.
  if (accounted) {
    EXPECT_LT(cost.memory_bytes, (32ll + 32 + 24) << 20) << "the server held " << (cost.memory_bytes >> 20) << " MiB";
  }
}

TEST(tcp_server, parallel_gets_of_one_large_value_share_it) {
  server_process server({});
  const std::size_t value = std::size_t{4} << 20;
  {
    tcp_store s("127.0.0.1", server.port(), false, 5s);
    std::vector<std::byte> v(value);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::byte>(i * 13);
    s.set("large", v);
  }
  // 48 clients ask for it and read nothing yet: their replies wait in the server.
  std::vector<int> fds;
  for (int c = 0; c < 48; ++c) {
    fds.push_back(connect_to(server.port()));
    auto frame = request_head(detail::tcp_op::get, "large", 4);
    detail::put_u32(frame, 1000);
    ASSERT_TRUE(send_all(fds.back(), frame.data(), frame.size()));
  }
  std::this_thread::sleep_for(300ms);
  for (int fd : fds) {
    std::vector<std::byte> reply(4 + 1 + value);
    std::size_t got = 0;
    while (got < reply.size()) {
      const ssize_t n = ::recv(fd, reply.data() + got, reply.size() - got, 0);
      ASSERT_GT(n, 0);
      got += static_cast<std::size_t>(n);
    }
    EXPECT_EQ(reply[4], static_cast<std::byte>(detail::tcp_status::ok));
    EXPECT_EQ(reply[5 + 12345], static_cast<std::byte>(12345 * 13));
    ::close(fd);
  }
  const auto cost = server.stop();
  if (accounted) {
    EXPECT_LT(cost.memory_bytes, 24ll << 20) << "48 gets of one 4 MiB value cost " << (cost.memory_bytes >> 20) << " MiB";
  }
}

TEST(tcp_server, out_of_descriptors_it_backs_off_instead_of_spinning_and_recovers) {
  // A sanitizer checks memory through a pipe of its own: out of descriptors, its reports
  // are false (UBSan: "object has invalid vptr").
  if (!accounted) GTEST_SKIP() << "sanitizers need descriptors of their own";
  tcp_server_limits limits;
  server_process server(limits, 64);
  std::vector<int> fds;
  // Past its 64 descriptors: the rest wait in the listen queue. Each asks something, so
  // that none is silent (closing silent ones would make room and hide a spin).
  auto add = request_head(detail::tcp_op::add, "n", 8);
  detail::put_u64(add, 1);
  for (int c = 0; c < 150; ++c)
    if (const int fd = connect_to(server.port()); fd >= 0 && send_all(fd, add.data(), add.size())) fds.push_back(fd);
  std::this_thread::sleep_for(2s);
  for (int fd : fds) ::close(fd);
  {
    tcp_store s("127.0.0.1", server.port(), false, 5s);
    s.set("after", mimatrix::test::bytes("fine"));
    EXPECT_EQ(mimatrix::test::text(s.get("after", 0ms)), "fine");
  }
  const auto cost = server.stop();
  // Spinning on a readable listening socket for 2 s would cost about 2 s.
  if (accounted) {
    EXPECT_LT(cost.cpu_seconds, 0.5) << "out of descriptors for 2 s, the server used " << cost.cpu_seconds << " s of CPU";
  }
}

TEST(tcp_server, closes_a_silent_connection_and_a_stalled_request_and_a_client_reconnects) {
  tcp_server_limits limits;
  limits.silent = 200ms;
  limits.stalled_request = 200ms;
  detail::tcp_server server("127.0.0.1", 0, limits);
  const int silent = connect_to(server.port());
  const int stalled = connect_to(server.port());
  auto head = request_head(detail::tcp_op::set, "k", 1000);
  ASSERT_TRUE(send_all(stalled, head.data(), head.size()));  // and none of the 1000 bytes
  tcp_store client("127.0.0.1", server.port(), false, 2s);
  EXPECT_TRUE(closed_within(silent, 3s));
  EXPECT_TRUE(closed_within(stalled, 3s));
  ::close(silent);
  ::close(stalled);
  // The store's own connection was silent as well: its first request connects again.
  client.set("k", mimatrix::test::bytes("v"));
  EXPECT_EQ(mimatrix::test::text(client.get("k", 0ms)), "v");
  std::this_thread::sleep_for(500ms);  // a connection that has spoken stays open
  EXPECT_EQ(client.add("n", 2), 2);
}

TEST(tcp_server, parked_gets_are_bounded_with_a_clear_error) {
  tcp_server_limits limits;
  limits.buffered_bytes = 64 * 1024;
  detail::tcp_server server("127.0.0.1", 0, limits);
  tcp_store s("127.0.0.1", server.port(), false, 2s);
  std::vector<std::unique_ptr<tcp_store>> waiting;
  std::vector<std::thread> gets;
  // Each parked get holds a 4 KiB key: the sixteenth passes 64 KiB.
  const std::string pad(4000, 'k');
  std::atomic<int> refused{0};
  for (int c = 0; c < 20; ++c)
    gets.emplace_back([&, c] {
      tcp_store client("127.0.0.1", server.port(), false, 2s);
      try {
        client.get(pad + std::to_string(c), 1500ms);
      } catch (const mimatrix::error& e) {
        // Refused as it arrives, or as it would park: "the store is busy: ..., retry later".
        if (std::string(e.what()).find("the store is busy") != std::string::npos) ++refused;
      }
    });
  for (auto& t : gets) t.join();
  EXPECT_GE(refused.load(), 4);
  s.set("after", mimatrix::test::bytes("fine"));  // once they are gone, it serves again
  EXPECT_EQ(mimatrix::test::text(s.get("after", 0ms)), "fine");
}

// What an earlier probe found handled already (issue 17), kept so: garbage, a length
// prefix no frame can have, a truncated frame, 400 idle connections and a slow-loris
// request each cost only their own connection, and the server goes on serving cheaply.
TEST(tcp_server, garbage_huge_prefixes_truncated_frames_idle_crowds_and_slow_clients_cost_only_themselves) {
  tcp_server_limits limits;
  limits.stalled_request = 300ms;
  server_process server(limits);
  tcp_store client("127.0.0.1", server.port(), false, 5s);
  client.set("k", mimatrix::test::bytes("v"));

  const int garbage = connect_to(server.port());
  const std::vector<std::byte> junk(4096, std::byte{0xff});  // its prefix declares 4 GiB
  (void)send_all(garbage, junk.data(), junk.size());
  EXPECT_TRUE(closed_within(garbage, 2s));

  const int huge = connect_to(server.port());
  std::vector<std::byte> prefix;
  detail::put_u32(prefix, 0x7fffffff);
  ASSERT_TRUE(send_all(huge, prefix.data(), prefix.size()));
  EXPECT_TRUE(closed_within(huge, 2s));

  const int truncated = connect_to(server.port());
  const auto head = request_head(detail::tcp_op::set, "cut", 1000);
  ASSERT_TRUE(send_all(truncated, head.data(), head.size()));
  ::close(truncated);  // and none of the 1000 bytes

  std::vector<int> crowd;
  for (int c = 0; c < 400; ++c) crowd.push_back(connect_to(server.port()));
  EXPECT_EQ(std::count(crowd.begin(), crowd.end(), -1), 0);

  const int slow = connect_to(server.port());  // one byte of a get every 50 ms
  const auto get = request_head(detail::tcp_op::get, "slow", 4);
  bool closed = false;
  for (std::size_t at = 0; at < get.size() && !closed; ++at) {
    closed = !send_all(slow, get.data() + at, 1) || closed_within(slow, 50ms);
  }
  EXPECT_TRUE(closed || closed_within(slow, 2s));

  EXPECT_EQ(mimatrix::test::text(client.get("k", 0ms)), "v");  // served throughout
  EXPECT_EQ(client.add("n", 3), 3);
  EXPECT_THROW(client.get("cut", 0ms), mimatrix::error);  // the truncated set stored nothing
  for (int fd : crowd) ::close(fd);
  ::close(garbage);
  ::close(huge);
  ::close(slow);
  const auto cost = server.stop();
  if (accounted) {
    EXPECT_LT(cost.cpu_seconds, 1.0);
  }
}

// A request that timed out on a stalled server (a tear-down's bounded goodbye) used to
// leave the client unusable for good: "lost by an earlier failure". The next request
// connects again once the server runs.
TEST(tcp_server, a_client_whose_request_timed_out_connects_again_for_the_next) {
  server_process server(tcp_server_limits{});
  tcp_store client("127.0.0.1", server.port(), false, 5s);
  EXPECT_EQ(client.add("n", 1), 1);
  ::kill(server.pid(), SIGSTOP);
  // A signal reaches another process later: until it has stopped, it may still answer
  // (seen once in CI).
  int status = 0;
  ASSERT_EQ(::waitpid(server.pid(), &status, WUNTRACED), server.pid());
  ASSERT_TRUE(WIFSTOPPED(status));
  EXPECT_THROW(client.add_within("n", 1, 200ms), mimatrix::error);
  ::kill(server.pid(), SIGCONT);
  const std::int64_t now = client.add("n", 1);  // the timed-out add may have been applied
  EXPECT_TRUE(now == 2 || now == 3) << now;
}

/// Reads one reply frame whole (its length prefix, then the rest); empty if the server
/// closed or reset the connection first.
std::vector<std::byte> read_reply(int fd) {
  std::vector<std::byte> reply(4);
  for (std::size_t got = 0, want = 4; got < want;) {
    const ssize_t n = ::recv(fd, reply.data() + got, want - got, 0);
    if (n <= 0) return {};
    got += static_cast<std::size_t>(n);
    if (got == 4 && want == 4) {
      want += static_cast<std::size_t>(detail::get_uint(reply.data(), 4));
      reply.resize(want);
    }
  }
  return reply;
}

// A barrier's last arriver may be the rank that hosts the store: it sets the key and
// leaves, and the others' gets of it must be answered, not reset (seen under ASan in
// bootstrap_rendezvous_test). The server, stopped the moment a request has arrived,
// still answers it.
TEST(tcp_server, a_stopping_server_answers_the_requests_that_had_arrived) {
  for (int round = 0; round < 20; ++round) {
    auto server = std::make_unique<detail::tcp_server>("127.0.0.1", 0);
    const int fd = connect_to(server->port());
    ASSERT_GE(fd, 0);
    auto set = request_head(detail::tcp_op::set, "done", 2);
    set.push_back(std::byte{7});
    set.push_back(std::byte{9});
    ASSERT_TRUE(send_all(fd, set.data(), set.size()));
    ASSERT_EQ(read_reply(fd).size(), 5u);  // accepted and served
    auto get = request_head(detail::tcp_op::get, "done", 4);
    detail::put_u32(get, 60000);
    ASSERT_TRUE(send_all(fd, get.data(), get.size()));
    server.reset();
    const auto reply = read_reply(fd);
    ::close(fd);
    ASSERT_EQ(reply.size(), 7u) << "round " << round << ": the get was not answered";
    EXPECT_EQ(reply[4], static_cast<std::byte>(detail::tcp_status::ok));
    EXPECT_EQ(reply[5], std::byte{7});
    EXPECT_EQ(reply[6], std::byte{9});
  }
}

}  // namespace
