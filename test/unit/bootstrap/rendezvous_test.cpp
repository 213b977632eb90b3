// Tests of bootstrap/rendezvous.hpp: which store the environment opens, the message when
// there is none, all_gather and barrier across rank threads with their own clients, rank
// claims (a rank started twice), and the longest start-up timeout.
#include "mimatrix/bootstrap/rendezvous.hpp"

#include <gtest/gtest.h>

#include "support/bytes.hpp"
#include "support/environment.hpp"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using mimatrix::errc;
using mimatrix::bootstrap::identity;
using mimatrix::bootstrap::store;
using mimatrix::bootstrap::tcp_store;

using mimatrix::test::environment;
using mimatrix::test::lookup;
using mimatrix::test::rank_of;

std::string open_failure(const identity& id, const environment& vars) {
  try {
    mimatrix::bootstrap::open_store(id, 200ms, lookup(vars));
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "nothing thrown";
  return {};
}

using mimatrix::test::bytes;
using mimatrix::test::text;

TEST(open_store, one_rank_with_nothing_set_is_in_memory) {
  auto s = mimatrix::bootstrap::open_store(rank_of(0, 1), 100ms, lookup({}));
  EXPECT_EQ(s->where(), "memory:");
  EXPECT_EQ(s->add("n", 2), 2);
}

TEST(open_store, many_ranks_with_nothing_set_say_what_to_set) {
  const std::string m = open_failure(rank_of(2, 4), {});
  EXPECT_NE(m.find("rank 2 of 4"), std::string::npos) << m;
  EXPECT_NE(m.find("MASTER_ADDR and MASTER_PORT"), std::string::npos) << m;
  EXPECT_NE(m.find("MIMATRIX_STORE=file:"), std::string::npos) << m;
}

TEST(open_store, master_addr_and_port_open_a_tcp_store_rank_0_serves) {
  const std::string port = std::to_string(tcp_store("127.0.0.1", 0, true, 1s).port());  // free again now
  const environment vars = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}};
  auto server = mimatrix::bootstrap::open_store(rank_of(0, 2), 1s, lookup(vars));
  auto client = mimatrix::bootstrap::open_store(rank_of(1, 2), 1s, lookup(vars));
  EXPECT_EQ(server->where(), "tcp://127.0.0.1:" + port);
  client->set("k", bytes("v"));
  EXPECT_EQ(server->get("k", 1s), bytes("v"));
}

// A communicator destroyed and made again, or two at once (test/integration/recreate_test.cpp):
// before, each of rank 0's stores ran its own server, which went with it under the other
// ranks, and a second one could not bind the port.
TEST(open_store, rank_0s_process_serves_the_job_store_until_it_exits) {
  const std::string port = std::to_string(tcp_store("127.0.0.1", 0, true, 1s).port());  // free again now
  const environment vars = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}};
  auto first = mimatrix::bootstrap::open_store(rank_of(0, 2), 1s, lookup(vars));
  auto peer = mimatrix::bootstrap::open_store(rank_of(1, 2), 1s, lookup(vars));
  auto second = mimatrix::bootstrap::open_store(rank_of(0, 2), 1s, lookup(vars));  // at once
  first->set("a", bytes("1"));
  EXPECT_EQ(second->get("a", 0ms), bytes("1"));
  first.reset();
  second.reset();
  peer->set("b", bytes("2"));  // rank 0 has no store now, and the peer's is still served
  auto third = mimatrix::bootstrap::open_store(rank_of(0, 2), 1s, lookup(vars));
  EXPECT_EQ(third->get("b", 0ms), bytes("2"));
  EXPECT_EQ(text(peer->get("a", 0ms)), "1");
}

// ThreadSanitizer ends the child of a process with threads once it starts one (its
// die_after_fork), and here both have threads: the servers.
#if defined(__SANITIZE_THREAD__)
constexpr bool forks_with_threads = false;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool forks_with_threads = false;
#else
constexpr bool forks_with_threads = true;
#endif
#else
constexpr bool forks_with_threads = true;
#endif

TEST(open_store, a_forked_child_serves_its_own_job_store_and_exits) {
  if (!forks_with_threads) GTEST_SKIP() << "ThreadSanitizer: a child may not start threads after a fork with threads";
  const std::string parents = std::to_string(tcp_store("127.0.0.1", 0, true, 1s).port());
  const environment vars = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", parents}};
  mimatrix::bootstrap::open_store(rank_of(0, 2), 1s, lookup(vars))->set("k", bytes("still served"));
  const std::string childs = std::to_string(tcp_store("127.0.0.1", 0, true, 1s).port());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Its copy of the parent's server has no thread and the parent's sockets: stopping it
    // at exit would stop the parent's.
    ::alarm(10);
    const environment own = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", childs}};
    auto s = mimatrix::bootstrap::open_store(rank_of(0, 2), 1s, lookup(own));
    s->set("k", bytes("v"));
    const bool served = s->get("k", 0ms) == bytes("v");
    s.reset();
    // What exit does, without LeakSanitizer's check at exit: it would take what the
    // parent's threads (not here) held for leaks.
    mimatrix::bootstrap::detail::job_servers_here().stop();
    ::_exit(served ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(text(mimatrix::bootstrap::open_store(rank_of(1, 2), 1s, lookup(vars))->get("k", 0ms)), "still served");
}

TEST(open_store, mimatrix_store_tcp_and_file) {
  const int port = tcp_store("127.0.0.1", 0, true, 1s).port();
  const environment tcp = {{"MIMATRIX_STORE", "tcp://localhost:" + std::to_string(port)},
                           {"MASTER_ADDR", "ignored"}, {"MASTER_PORT", "1"}};
  auto server = mimatrix::bootstrap::open_store(rank_of(0, 3), 1s, lookup(tcp));
  EXPECT_EQ(server->where(), "tcp://localhost:" + std::to_string(port));

  const auto dir = std::filesystem::temp_directory_path() / ("mimatrix-rendezvous-" + std::to_string(::getpid()));
  const environment file = {{"MIMATRIX_STORE", "file:" + dir.string()}};
  auto s = mimatrix::bootstrap::open_store(rank_of(1, 3), 1s, lookup(file));
  EXPECT_EQ(s->where(), "file:" + dir.string());
  s->set("k", bytes("v"));
  EXPECT_EQ(mimatrix::bootstrap::open_store(rank_of(2, 3), 1s, lookup(file))->get("k", 0ms), bytes("v"));
  std::filesystem::remove_all(dir);
}

TEST(open_store, malformed_settings_are_named) {
  EXPECT_NE(open_failure(rank_of(0, 2), {{"MIMATRIX_STORE", "redis://x"}}).find("MIMATRIX_STORE='redis://x'"),
            std::string::npos);
  EXPECT_NE(open_failure(rank_of(0, 2), {{"MIMATRIX_STORE", "tcp://host"}}).find("MIMATRIX_STORE='host'"),
            std::string::npos);
  EXPECT_NE(open_failure(rank_of(0, 2), {{"MIMATRIX_STORE", "tcp://host:99999"}}).find("tcp://host:port"),
            std::string::npos);
  EXPECT_NE(open_failure(rank_of(0, 2), {{"MASTER_ADDR", "h"}}).find("MASTER_PORT is not"), std::string::npos);
  EXPECT_NE(open_failure(rank_of(0, 2), {{"MASTER_PORT", "29500"}}).find("MASTER_ADDR is not"), std::string::npos);
  EXPECT_NE(open_failure(rank_of(0, 2), {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "x1"}}).find("MASTER_PORT='x1'"),
            std::string::npos);
  EXPECT_NE(open_failure(rank_of(0, 2), {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "0"}}).find("MASTER_PORT='0'"),
            std::string::npos);
}

// Found by a black-box test: the messages above named no rank, which a job of many
// processes needs to find the one that was started wrong.
TEST(open_store, a_malformed_setting_names_the_rank_that_read_it) {
  for (const auto& env : std::vector<environment>{{{"MIMATRIX_STORE", "redis://x"}},
                                                   {{"MIMATRIX_STORE", "tcp://host"}},
                                                   {{"MIMATRIX_STORE", "file:"}},
                                                   {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "x1"}}}) {
    const std::string m = open_failure(rank_of(3, 4), env);
    EXPECT_EQ(m.rfind("rank 3: ", 0), 0u) << m;
    EXPECT_EQ(m.find("rank 3: rank 3"), std::string::npos) << m;
  }
}

TEST(split_host_port, ipv4_names_and_bracketed_ipv6) {
  using mimatrix::bootstrap::detail::split_host_port;
  EXPECT_EQ(split_host_port("10.0.0.1:29500", "X"), std::make_pair(std::string("10.0.0.1"), 29500));
  EXPECT_EQ(split_host_port("node-7:1", "X"), std::make_pair(std::string("node-7"), 1));
  EXPECT_EQ(split_host_port("[::1]:8080", "X"), std::make_pair(std::string("::1"), 8080));
  EXPECT_THROW(split_host_port("[::1]8080", "X"), mimatrix::error);
  EXPECT_THROW(split_host_port(":8080", "X"), mimatrix::error);
}

/// `size` rank threads, each with its own client of one tcp store (rank 0 serves it).
template <class F>
void run_ranks(int size, F body) {
  tcp_store server("127.0.0.1", 0, true, 1s);
  const int port = server.port();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      tcp_store s("127.0.0.1", port, false, 2s);
      body(s, r);
    });
  for (auto& t : threads) t.join();
}

TEST(all_gather, four_ranks_see_every_blob_in_rank_order) {
  constexpr int size = 4;
  std::vector<std::vector<std::vector<std::byte>>> seen(size);
  run_ranks(size, [&](store& s, int r) {
    const std::vector<std::byte> mine(static_cast<std::size_t>(r) + 1, static_cast<std::byte>('a' + r));
    seen[r] = mimatrix::bootstrap::all_gather(s, "addresses", r, size, mine, 2s);
    seen[r] = mimatrix::bootstrap::all_gather(s, "again", r, size, seen[r][(r + 1) % size], 2s);
  });
  for (int r = 0; r < size; ++r) {
    ASSERT_EQ(seen[r].size(), std::size_t{size});
    for (int q = 0; q < size; ++q) {
      const int from = (q + 1) % size;  // the second round passed on each rank's right neighbour's blob
      EXPECT_EQ(seen[r][q], std::vector<std::byte>(static_cast<std::size_t>(from) + 1, static_cast<std::byte>('a' + from)))
          << "rank " << r << " slot " << q;
    }
  }
}

TEST(all_gather, a_missing_rank_is_named) {
  mimatrix::bootstrap::memory_store s;
  s.set("job/0", bytes("x"));
  try {
    mimatrix::bootstrap::all_gather(s, "job", 1, 3, bytes("y"), 100ms);
    FAIL() << "rank 2 never published";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::timeout);
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 1, all_gather"), std::string::npos) << m;
    EXPECT_NE(m.find("rank(s) 2 did not publish"), std::string::npos) << m;
    EXPECT_NE(m.find("100 ms"), std::string::npos) << m;
  }
}

// A rank known to have ended (`gone` says how) ends the exchange at once with peer_lost,
// long before the deadline; one that has not is waited for as before.
TEST(all_gather, a_rank_known_gone_ends_the_wait_at_once_naming_it) {
  mimatrix::bootstrap::memory_store s;
  s.set("job/0", bytes("x"));
  const auto start = std::chrono::steady_clock::now();
  try {
    mimatrix::bootstrap::all_gather(s, "job", 1, 3, bytes("y"), 30s, [](int r) {
      return r == 2 ? std::string("(pid 4242 on this host) exited") : std::string();
    });
    FAIL() << "rank 2 is gone";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::peer_lost);
    EXPECT_NE(std::string(e.what()).find("rank 2 (pid 4242 on this host) exited before it published"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  s.set("late/0", bytes("x"));
  std::thread late([&] {
    std::this_thread::sleep_for(600ms);
    s.set("late/2", bytes("z"));
  });
  const auto all = mimatrix::bootstrap::all_gather(s, "late", 1, 3, bytes("y"), 30s, [](int) { return std::string(); });
  late.join();
  EXPECT_EQ(all[2], bytes("z"));
}

TEST(all_gather, a_store_lost_while_waiting_names_the_rank_awaited) {
  // Rank 0 serves the store, waits for rank 1 in vain and exits: rank 2, waiting for rank 1
  // too, names rank 1 rather than only the lost connection.
  auto served = std::make_unique<tcp_store>("127.0.0.1", 0, true, 2s);
  tcp_store client("127.0.0.1", served->port(), false, 2s);
  std::thread rank0([&] {
    try {
      mimatrix::bootstrap::all_gather(*served, "job", 0, 3, bytes("x"), 200ms);
    } catch (const mimatrix::error&) {
    }
    served.reset();
  });
  try {
    mimatrix::bootstrap::all_gather(client, "job", 2, 3, bytes("z"), 5s);
    FAIL() << "rank 1 never published";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::transport);
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 2, all_gather"), std::string::npos) << m;
    EXPECT_NE(m.find("waiting for rank 1 to publish"), std::string::npos) << m;
    EXPECT_NE(m.find("has rank 0 exited?"), std::string::npos) << m;
  }
  rank0.join();
}

TEST(barrier, four_ranks_leave_together_and_the_name_can_be_reused) {
  constexpr int size = 4, rounds = 3;
  std::atomic<int> entered{0};
  std::vector<int> seen_on_leaving(size * rounds);
  run_ranks(size, [&](store& s, int r) {
    for (int round = 0; round < rounds; ++round) {
      if (r == round) std::this_thread::sleep_for(30ms);  // one late rank each round
      entered.fetch_add(1);
      mimatrix::bootstrap::barrier(s, "sync", size, 2s);
      seen_on_leaving[round * size + r] = entered.load();
    }
  });
  // Nobody leaves round k before all `size` ranks entered it.
  for (int round = 0; round < rounds; ++round)
    for (int r = 0; r < size; ++r) EXPECT_GE(seen_on_leaving[round * size + r], (round + 1) * size) << round << " " << r;
}

TEST(barrier, a_timeout_says_how_many_ranks_arrived) {
  mimatrix::bootstrap::memory_store s;
  s.add("start/arrived", 1);  // one other rank is already there
  try {
    mimatrix::bootstrap::barrier(s, "start", 4, 100ms);
    FAIL() << "two of four ranks passed a barrier";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::timeout);
    const std::string m = e.what();
    EXPECT_NE(m.find("2 of 4 ranks arrived"), std::string::npos) << m;
    EXPECT_NE(m.find("'start'"), std::string::npos) << m;
    EXPECT_NE(m.find("memory:"), std::string::npos) << m;
  }
}

// ---- claim_rank: two processes started with the same rank --------------------------------

/// One of each store, fresh: the claims must hold on all of them.
std::vector<std::unique_ptr<store>> every_store(const std::filesystem::path& dir) {
  std::vector<std::unique_ptr<store>> stores;
  stores.push_back(std::make_unique<mimatrix::bootstrap::memory_store>());
  stores.push_back(std::make_unique<tcp_store>("127.0.0.1", 0, true, 1s));
  stores.push_back(std::make_unique<mimatrix::bootstrap::file_store>(dir.string()));
  return stores;
}

std::filesystem::path fresh_directory(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(claim_rank, a_second_claim_of_a_rank_names_both_processes) {
  const auto dir = fresh_directory("mimatrix-claims");
  for (auto& s : every_store(dir)) {
    SCOPED_TRACE(s->where());
    mimatrix::bootstrap::claim_rank(*s, "job/claim", 0, 1s, "host a pid 9");
    mimatrix::bootstrap::claim_rank(*s, "job/claim", 1, 1s, "host a pid 10");
    try {
      mimatrix::bootstrap::claim_rank(*s, "job/claim", 1, 1s, "host b pid 11");
      FAIL() << "rank 1 claimed twice";
    } catch (const mimatrix::error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      const std::string m = e.what();
      EXPECT_NE(m.find("rank 1 is claimed twice: by host a pid 10 and host b pid 11"), std::string::npos) << m;
      EXPECT_NE(m.find(s->where()), std::string::npos) << m;
    }
    // A third is refused as well; another generation (prefix) starts afresh.
    EXPECT_THROW(mimatrix::bootstrap::claim_rank(*s, "job/claim", 1, 1s, "host c pid 12"), mimatrix::error);
    mimatrix::bootstrap::claim_rank(*s, "job/2/claim", 1, 1s, "host b pid 11");
  }
  std::filesystem::remove_all(dir);
}

TEST(claim_rank, of_racing_claimers_exactly_one_wins) {
  // Processes started together with the same rank, each with its own client: one wins, every
  // other one is told who did.
  constexpr int claimers = 6;
  tcp_store server("127.0.0.1", 0, true, 1s);
  std::atomic<int> won{0};
  std::vector<std::string> messages(claimers);
  std::vector<std::thread> threads;
  for (int c = 0; c < claimers; ++c)
    threads.emplace_back([&, c] {
      tcp_store s("127.0.0.1", server.port(), false, 2s);
      try {
        mimatrix::bootstrap::claim_rank(s, "race", 3, 2s, "host h pid " + std::to_string(100 + c));
        won.fetch_add(1);
      } catch (const mimatrix::error& e) {
        messages[c] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(won.load(), 1);
  const std::string winner = text(server.get("race/3", 0ms));
  for (int c = 0; c < claimers; ++c) {
    if (messages[c].empty()) {
      EXPECT_EQ(winner, "host h pid " + std::to_string(100 + c));
      continue;
    }
    EXPECT_NE(messages[c].find("rank 3 is claimed"), std::string::npos) << messages[c];
    EXPECT_NE(messages[c].find("by " + winner + " and host h pid " + std::to_string(100 + c)), std::string::npos)
        << messages[c];
  }
}

TEST(claim_rank, by_default_a_claim_names_this_host_and_pid) {
  mimatrix::bootstrap::memory_store s;
  const std::string me = mimatrix::bootstrap::this_process();
  EXPECT_EQ(me.rfind("host ", 0), 0u) << me;
  EXPECT_NE(me.find(" pid " + std::to_string(::getpid())), std::string::npos) << me;
  mimatrix::bootstrap::claim_rank(s, "g", 0, 1s);
  EXPECT_EQ(text(s.get("g/0", 0ms)), me);
}

// ---- the longest start-up timeout ------------------------------------------------------

// What MIMATRIX_STARTUP_TIMEOUT_MS=9223372036854775807 hands start-up: "never", which must
// wait like any long deadline instead of overflowing the clock and failing at once.
constexpr std::chrono::milliseconds longest{std::numeric_limits<std::chrono::milliseconds::rep>::max()};

TEST(startup_timeout, the_longest_one_waits_instead_of_overflowing) {
  const std::string port = std::to_string(tcp_store("127.0.0.1", 0, true, 1s).port());  // free again now
  const environment vars = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}};
  std::vector<std::vector<std::vector<std::byte>>> seen(2);
  std::vector<std::string> problems(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        if (r == 0) std::this_thread::sleep_for(50ms);  // rank 1 connects and waits first
        auto s = mimatrix::bootstrap::open_store(rank_of(r, 2), longest, lookup(vars));
        mimatrix::bootstrap::claim_rank(*s, "start/claim", r, longest);
        if (r == 1) std::this_thread::sleep_for(50ms);  // rank 0 waits for rank 1's blob
        seen[r] = mimatrix::bootstrap::all_gather(*s, "start/addr", r, 2, bytes(std::to_string(r)), longest);
        mimatrix::bootstrap::barrier(*s, "start/ready", 2, longest);
      } catch (const std::exception& e) {
        problems[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(problems[r], "") << "rank " << r;
    ASSERT_EQ(seen[r].size(), 2u);
    EXPECT_EQ(text(seen[r][1 - r]), std::to_string(1 - r));
  }
}

TEST(startup_timeout, the_longest_one_waits_on_memory_and_file_stores_too) {
  const auto dir = fresh_directory("mimatrix-longest");
  mimatrix::bootstrap::memory_store memory;
  mimatrix::bootstrap::file_store file(dir.string()), file_writer(dir.string());
  const std::pair<store*, store*> waiter_and_setter[] = {{&memory, &memory}, {&file, &file_writer}};
  for (auto [waiter, setter] : waiter_and_setter) {
    SCOPED_TRACE(waiter->where());
    std::thread late([setter] {
      std::this_thread::sleep_for(50ms);
      setter->set("late", bytes("here"));
    });
    std::string got;
    try {
      got = text(waiter->get("late", longest));
    } catch (const std::exception& e) {
      got = e.what();
    }
    late.join();
    EXPECT_EQ(got, "here");
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
