// The job server and its worker client when things go wrong, in one process: a revoke
// ends a rendezvous at once (and the dead worker leaves the status), every member gets a
// sample a step, a server that accepts but never answers is an error naming it, and the
// status follows the completed step and a job whose members all left.
#include "server.hpp"
#include "worker.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace mimatrix::job {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
namespace asio = boost::asio;
const char* const secret = "recovery-test-secret";

/// A job server on a thread and `n` workers (heartbeats 50 ms apart).
struct group {
  group(int n, server_settings s) : server(io, with_secret(std::move(s))), thread([this] { io.run(); }) {
    for (int i = 0; i < n; ++i) workers.push_back(std::make_unique<worker_client>(settings("host" + std::to_string(i))));
  }
  ~group() {
    workers.clear();
    io.stop();
    thread.join();
  }
  static server_settings with_secret(server_settings s) {
    s.secret = secret;
    s.quiet = true;
    return s;
  }
  worker_settings settings(const std::string& host) const {
    worker_settings w;
    w.port = server.port();
    w.secret = secret;
    w.info.host = host;
    w.heartbeat = 50ms;
    return w;
  }
  /// `job_server status` as an observer sees it.
  std::string status() const {
    worker_settings w = settings("status");
    w.info.accelerators = job_server::observer_mark;
    w.heartbeat = 0ms;
    return worker_client(w).status();
  }
  /// Waits until the status holds `text`.
  std::string status_with(const std::string& text, std::chrono::milliseconds within = 5s) const {
    const auto until = std::chrono::steady_clock::now() + within;
    std::string last;
    while (std::chrono::steady_clock::now() < until) {
      if ((last = status()).find(text) != std::string::npos) return last;
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "the status did not show '" << text << "' within " << within.count() << " ms:\n" << last;
    return last;
  }

  asio::io_context io;
  job_server server;
  std::thread thread;
  std::vector<std::unique_ptr<worker_client>> workers;
};

server_settings of(int expected, int minimum) {
  server_settings s;
  s.expected = expected;
  s.minimum = minimum;
  return s;
}

TEST(job_server_recovery, a_revoke_ends_a_rendezvous_at_once_and_the_survivors_form_the_next_generation) {
  group g(3, of(3, 2));
  std::vector<assignment> first;
  for (auto& w : g.workers) first.push_back(w->next_assignment(10s));
  ASSERT_EQ(first[0].generation, 1u);
  // Rank 0 waits in the rendezvous for a key no one sets; a member dies meanwhile.
  auto waiting = std::async(std::launch::async, [&] {
    job_store store(*g.workers[0], first[0].generation);
    (void)store.get("never", 60s);
  });
  std::this_thread::sleep_for(100ms);
  g.workers[2].reset();
  ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready) << "the revoke did not end the rendezvous";
  EXPECT_THROW(waiting.get(), error);
  for (int i = 0; i < 2; ++i) {
    const assignment a = g.workers[i]->next_assignment(10s);
    EXPECT_EQ(a.generation, 2u);
    EXPECT_EQ(a.size, 2u);
  }
  const std::string status = g.status_with("generation 2 running, 2 ranks");
  EXPECT_EQ(status.find("host2"), std::string::npos) << status;
}

TEST(job_server_recovery, every_member_gets_a_sample_a_step_however_slow) {
  const split s = split_by_throughput({5000.0, 1.0, 5000.0}, 256, 60000);
  EXPECT_EQ(std::accumulate(s.batch.begin(), s.batch.end(), 0u), 256u);
  for (std::size_t r = 0; r < s.batch.size(); ++r) {
    EXPECT_GE(s.batch[r], 1u) << "rank " << r;
    EXPECT_LT(s.shard[r].first, s.shard[r].second) << "rank " << r;
  }
}

TEST(job_server_recovery, no_more_ranks_form_than_the_global_batch_has_samples) {
  server_settings s = of(2, 2);
  s.global_batch = 2;
  group g(3, s);
  int assigned = 0;
  for (auto& w : g.workers) try {
      const assignment a = w->next_assignment(1500ms);
      EXPECT_EQ(a.size, 2u);
      EXPECT_EQ(a.local_batch, 1u);
      ++assigned;
    } catch (const error&) {
    }
  EXPECT_EQ(assigned, 2);
}

TEST(job_server_recovery, a_server_that_never_answers_is_an_error_naming_it) {
  asio::io_context io;
  asio::ip::tcp::acceptor silent(io, asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  worker_settings w;
  w.port = silent.local_endpoint().port();
  w.secret = secret;
  w.answer_within = 300ms;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    worker_client client(w);
    FAIL() << "a silent server was taken for a job server";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(w.port)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("did not answer"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(job_server_recovery, a_refused_connection_names_the_server) {
  worker_settings w;
  {
    asio::io_context io;
    asio::ip::tcp::acceptor closed(io, asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    w.port = closed.local_endpoint().port();
  }
  w.secret = secret;
  try {
    worker_client client(w);
    FAIL() << "connected to a closed port";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("job server at tcp://127.0.0.1:" + std::to_string(w.port)), std::string::npos)
        << e.what();
  }
}

TEST(job_server_recovery, the_status_shows_the_completed_step_and_a_job_whose_members_all_left_is_done) {
  group g(2, of(2, 2));
  std::uint64_t generation = 0;
  for (auto& w : g.workers) {
    generation = w->next_assignment(10s).generation;
    heartbeat h;
    h.generation = generation;
    h.step = 7;
    w->report(h);
  }
  g.status_with("generation 1 running, 2 ranks, last completed step 7");
  for (auto& w : g.workers) w->leave(generation);
  const std::string done = g.status_with("generation 1 done, 0 ranks, last completed step 7");
  EXPECT_EQ(done.find("rank 0"), std::string::npos) << done;
}

}  // namespace
}  // namespace mimatrix::job
