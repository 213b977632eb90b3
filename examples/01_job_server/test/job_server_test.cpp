// The job server on loopback with worker processes that allreduce over libfabric (shm),
// meeting through the server's store: a group of four forms and is exact; a killed worker
// yields a three-rank generation whose allreduces are exact; a late worker is admitted at
// the next generation; a slower worker gets a smaller local batch; bad and
// unauthenticated clients are turned away while the group works.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <fstream>
#include <iterator>
#include <memory>
#include <utility>
#include <mutex>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "mimatrix/algorithm/hdrm.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "multi_process.hpp"
#include "server.hpp"
#include "worker.hpp"

namespace mimatrix {
namespace {

using namespace std::chrono_literals;
using transport::fabric;
const char* const secret = "test-secret-7f3a";

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

/// A worker: joins, and in each generation allreduces every 20 ms, reporting steps in
/// heartbeats, until it has done STEPS steps in a generation of TARGET ranks. The worker
/// given rank KILL_RANK in generation 1 kills itself after its second step.
MIMATRIX_SCENARIO(worker) {
  job::worker_settings s;
  s.port = std::uint16_t(env_int("JOB_PORT", 0));
  s.secret = secret;
  s.info.host = std::getenv("HOST_FROM_RANK") ? "h" + std::string(std::getenv("RANK")) : "localhost";
  s.info.throughput = env_int("THROUGHPUT", 100);
  s.heartbeat = 100ms;
  s.reconnect_for = std::chrono::milliseconds(env_int("RECONNECT_MS", 0));
  job::worker_client w(s);
  std::mutex current_mutex;
  fabric* current = nullptr;
  w.on_revoke([&](const job::revoke& r) {
    std::lock_guard lock(current_mutex);
    if (current) current->abort("the job server revoked generation " + std::to_string(r.generation) + ": " + r.reason);
  });
  const int target = env_int("TARGET", 4), steps = env_int("STEPS", 5), kill_rank = env_int("KILL_RANK", -1);
  // A step's compute takes this long a sample of the local batch (a slower machine: more),
  // and the worker reports the throughput it implies, as a trainer measures its own.
  const int per_sample_us = env_int("PER_SAMPLE_US", 0);
  bool failed = false;  // the last generation ended by a failure, at failed_at
  auto failed_at = std::chrono::steady_clock::now();
  while (true) {
    const job::assignment a = w.next_assignment(60s);
    std::printf("generation %llu: rank %u of %u on %s, batch %u, shard [%llu, %llu)\n",
                static_cast<unsigned long long>(a.generation), a.rank, a.size, s.info.host.c_str(), a.local_batch,
                static_cast<unsigned long long>(a.shard_begin), static_cast<unsigned long long>(a.shard_end));
    std::fflush(stdout);
    if (w.revoked() >= a.generation) continue;  // already over
    transport::fabric_options options;
    options.group = job::group_name(a);
    communicator<fabric> comm(job::identity_of(a), std::make_shared<job::job_store>(w, a.generation), options);
    comm.set_timeout(10s);
    {
      std::lock_guard lock(current_mutex);
      current = &comm.transport();
    }
    if (w.revoked() >= a.generation) comm.transport().abort("revoked before it started");
    // On the BiGraph the cluster description gives, HDRM; else a ring.
    std::function<void(std::vector<std::int64_t>&)> sum;
    if (std::getenv("USE_BIGRAPH")) {
      auto hdrm = std::make_shared<allreduce<fabric, topology::bigraph, reduce::sum<std::int64_t>, algorithm::hdrm>>(
          comm, job::bigraph_of(a));
      sum = [hdrm](std::vector<std::int64_t>& v) { (*hdrm)(v); };
    } else {
      auto ring = std::make_shared<allreduce<fabric, topology::ring, reduce::sum<std::int64_t>>>(comm);
      sum = [ring](std::vector<std::int64_t>& v) { (*ring)(v); };
    }
    int done = 0;
    bool exact = true;
    const std::uint64_t requests_before_steps = w.requests_made();
    try {
      for (int step = 1; step <= (int(a.size) == target ? steps : 1000000); ++step) {
        if (per_sample_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(per_sample_us) * a.local_batch);
        std::vector<std::int64_t> data(10000, comm.rank() + 1);
        sum(data);
        exact = exact && data[0] == std::int64_t(a.size) * (a.size + 1) / 2 && data.back() == data[0];
        ++done;
        if (done == 1 && failed) {
          std::printf("RECOVERED in %.0f ms\n",
                      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - failed_at).count());
          failed = false;
        }
        w.report(job::heartbeat{a.generation, a.resume_step + std::uint64_t(step), 20, 1, 0, 0,
                                per_sample_us > 0 ? 1e6 / per_sample_us : 0});
        if (a.generation == 1 && int(a.rank) == kill_rank && step == 2) ::raise(SIGKILL);
        std::this_thread::sleep_for(20ms);
      }
    } catch (const error& e) {
      failed = true;
      failed_at = std::chrono::steady_clock::now();
      std::printf("generation %llu ended after %d steps: %s\n", static_cast<unsigned long long>(a.generation), done,
                  e.what());
    }
    // Steps wait on the server for nothing: no store request between the first and last.
    std::printf("server requests during %d steps: %llu\n", done,
                static_cast<unsigned long long>(w.requests_made() - requests_before_steps));
    {
      std::lock_guard lock(current_mutex);
      current = nullptr;
    }
    if (!exact) return std::printf("generation %llu: a result was wrong\n", static_cast<unsigned long long>(a.generation)), 1;
    if (int(a.size) == target && done == steps) {
      w.leave(a.generation);
      std::printf("DONE generation %llu size %u: %d steps exact\n", static_cast<unsigned long long>(a.generation),
                  a.size, done);
      return 0;
    }
  }
}

job::server_settings group_of(int expected, int minimum) {
  job::server_settings s;
  s.expected = expected;
  s.minimum = minimum;
  return s;
}

/// The server on a thread of the test process.
struct running_server {
  explicit running_server(job::server_settings s)
      : server(io, with_secret(std::move(s))), thread([this] {
          try {
            io.run();
          } catch (const std::exception& e) {
            ADD_FAILURE() << "the job server's thread threw: " << e.what();
          }
        }) {}
  ~running_server() {
    io.stop();
    thread.join();
  }
  /// The server's view, read on its own thread.
  job::server_view view() {
    std::promise<job::server_view> got;
    boost::asio::post(io, [&] { got.set_value(server.view()); });
    return got.get_future().get();
  }
  /// Waits until some member reported step `step` (at most 60 s).
  void wait_for_step(std::uint64_t step) {
    for (int k = 0; k < 6000; ++k) {
      for (const auto& w : view().workers)
        if (w.member && w.last.step >= step) return;
      std::this_thread::sleep_for(10ms);
    }
  }
  static job::server_settings with_secret(job::server_settings s) {
    s.secret = secret;
    return s;
  }
  boost::asio::io_context io;
  job::job_server server;
  std::thread thread;
};

bootstrap::launch_result run_workers(int n, std::uint16_t port, std::vector<std::pair<std::string, std::string>> env) {
  bootstrap::launch_options o;
  o.ranks = n;
  o.argv = {test::self_executable()};
  o.env = std::move(env);
  o.env.emplace_back("MIMATRIX_TEST_SCENARIO", "worker");
  o.env.emplace_back("MIMATRIX_PROVIDER", "shm");
  o.env.emplace_back("JOB_PORT", std::to_string(port));
  o.capture = true;
  o.timeout = 90s;
  o.grace = 60s;  // a killed worker must not end the others
  return bootstrap::launch_local(o);
}

/// One more worker beside a launch (launch_local runs one launch at a time): its exit
/// status and output, once it ends.
struct lone_worker {
  lone_worker(std::uint16_t port, std::vector<std::pair<std::string, std::string>> env) {
    env.emplace_back("MIMATRIX_TEST_SCENARIO", "worker");
    env.emplace_back("MIMATRIX_PROVIDER", "shm");
    env.emplace_back("JOB_PORT", std::to_string(port));
    char path[] = "/tmp/mimatrix_job_worker_XXXXXX";
    const int fd = ::mkstemp(path);
    output_path = path;
    pid = ::fork();
    if (pid == 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      const std::string self = test::self_executable();
      ::execl(self.c_str(), self.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(fd);
  }
  /// Waits for it (at most 90 s, then kills it).
  int wait() {
    int status = 0;
    for (int k = 0; k < 9000 && ::waitpid(pid, &status, WNOHANG) == 0; ++k) std::this_thread::sleep_for(10ms);
    if (::waitpid(pid, &status, WNOHANG) == 0) ::kill(pid, SIGKILL), ::waitpid(pid, &status, 0);
    std::ifstream in(output_path);
    output.assign(std::istreambuf_iterator<char>(in), {});
    ::unlink(output_path.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  pid_t pid = -1;
  std::string output_path, output;
};

int done_lines(const bootstrap::launch_result& r, const std::string& what) {
  int n = 0;
  for (const auto& out : r.output) n += out.find(what) != std::string::npos;
  return n;
}

TEST(job_server, four_workers_form_a_group_and_allreduce_through_it) {
  running_server s(group_of(4, 4));
  const auto r = run_workers(4, s.server.port(), {{"TARGET", "4"}});
  EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  EXPECT_EQ(done_lines(r, "DONE generation 1 size 4: 5 steps exact"), 4) << test::all_output(r);
  EXPECT_EQ(done_lines(r, "server requests during 5 steps: 0"), 4) << test::all_output(r);
}

TEST(job_server, a_killed_worker_yields_a_generation_of_three_whose_allreduces_are_exact) {
  auto settings = group_of(4, 3);
  settings.heartbeat_deadline = 1500ms;
  running_server s(settings);
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_workers(4, s.server.port(), {{"TARGET", "3"}, {"KILL_RANK", "3"}});
  int killed = 0;
  for (int st : r.status) killed += st == 128 + SIGKILL;
  EXPECT_EQ(killed, 1) << test::all_output(r);
  EXPECT_EQ(done_lines(r, "DONE generation 2 size 3: 5 steps exact"), 3) << test::all_output(r);
  // From a survivor's failed allreduce to its first exact one in the new generation.
  for (const auto& out : r.output)
    if (const auto at = out.find("RECOVERED in "); at != std::string::npos)
      std::printf("%s\n", out.substr(at, out.find('\n', at) - at).c_str());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
}

TEST(job_server, a_late_worker_is_admitted_at_the_next_generation) {
  running_server s(group_of(3, 3));
  std::unique_ptr<lone_worker> late;
  std::thread starter([&] {
    s.wait_for_step(2);
    // It declares no throughput (as resnet_train): it counts at the others' mean, an
    // equal share of 128, where it once counted at 1 sample/s and got a batch of 1.
    late = std::make_unique<lone_worker>(s.server.port(),
                                         std::vector<std::pair<std::string, std::string>>{{"TARGET", "4"}, {"THROUGHPUT", "0"}});
  });
  const auto r = run_workers(3, s.server.port(), {{"TARGET", "4"}});
  starter.join();
  EXPECT_EQ(late->wait(), 0) << late->output;
  EXPECT_NE(late->output.find("size 4: 5 steps exact"), std::string::npos) << late->output;
  EXPECT_NE(late->output.find("of 4 on localhost, batch 32,"), std::string::npos) << late->output;
  EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  EXPECT_EQ(done_lines(r, "size 4: 5 steps exact"), 3) << test::all_output(r);
  EXPECT_EQ(done_lines(r, "generation 1: rank"), 3) << test::all_output(r);
}

TEST(job_server, a_slower_worker_gets_a_proportionally_smaller_local_batch) {
  auto settings = group_of(2, 2);
  settings.samples = 1000;
  settings.global_batch = 100;
  running_server s(settings);
  lone_worker slow(s.server.port(), {{"TARGET", "2"}, {"THROUGHPUT", "100"}});
  const auto r = run_workers(1, s.server.port(), {{"TARGET", "2"}, {"THROUGHPUT", "300"}});
  EXPECT_EQ(slow.wait(), 0) << slow.output;
  // Shards follow the batches: a quarter of the 1000 samples for the slow one.
  const bool slow_first = slow.output.find("batch 25, shard [0, 250)") != std::string::npos;
  EXPECT_TRUE(slow_first || slow.output.find("batch 25, shard [750, 1000)") != std::string::npos) << slow.output;
  EXPECT_NE(r.output[0].find(slow_first ? "batch 75, shard [250, 1000)" : "batch 75, shard [0, 750)"), std::string::npos)
      << test::all_output(r);
}

/// Three workers (60 steps, reconnecting for 10 s) whose server goes away after step 5 and
/// starts again 300 ms later with `settings`; the workers' launch and the second server.
std::pair<bootstrap::launch_result, std::unique_ptr<running_server>> restart_mid_run(job::server_settings settings) {
  auto first = std::make_unique<running_server>(settings);
  std::unique_ptr<running_server> second;
  settings.port = first->server.port();
  std::thread restarter([&] {
    first->wait_for_step(5);
    first.reset();  // the server goes away in the middle of training
    std::this_thread::sleep_for(300ms);
    try {
      second = std::make_unique<running_server>(settings);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "the second server did not start: " << e.what();
    }
  });
  auto r = run_workers(3, settings.port, {{"TARGET", "3"}, {"STEPS", "60"}, {"RECONNECT_MS", "10000"}});
  restarter.join();
  return {std::move(r), std::move(second)};
}

TEST(job_server, a_restarted_server_takes_its_workers_back_and_loses_no_assignment) {
  char path[] = "/tmp/mimatrix_job_state_XXXXXX";
  ::close(::mkstemp(path));
  ::unlink(path);  // no state yet
  auto settings = group_of(3, 3);
  settings.state_file = path;
  const auto [r, second] = restart_mid_run(settings);
  EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  // The same generation went on: nothing was revoked, every step exact.
  EXPECT_EQ(done_lines(r, "DONE generation 1 size 3: 60 steps exact"), 3) << test::all_output(r);
  EXPECT_EQ(done_lines(r, "generation 2"), 0) << test::all_output(r);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->view().generation, 1u);
  ::unlink(path);
}

// Regression (a black-box test): a server restarted without --state-file formed its own
// generation 1 from the returning workers while they still ran the old server's generation
// 1, and showed their steps as its own. A worker's hello now names the generation it runs;
// one the server did not form is revoked, and the next forms above it.
TEST(job_server, a_server_restarted_without_its_state_ends_the_generation_it_does_not_know) {
  const auto [r, second] = restart_mid_run(group_of(3, 3));
  EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  EXPECT_EQ(done_lines(r, "generation 1 ended after"), 3) << test::all_output(r);
  EXPECT_EQ(done_lines(r, "does not know generation 1"), 3) << test::all_output(r);
  EXPECT_EQ(done_lines(r, "DONE generation 2 size 3: 60 steps exact"), 3) << test::all_output(r);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->view().generation, 2u);
}

TEST(job_server, status_names_the_generation_and_every_rank) {
  running_server s(group_of(2, 2));
  lone_worker first(s.server.port(), {{"TARGET", "2"}, {"STEPS", "40"}});
  lone_worker second(s.server.port(), {{"TARGET", "2"}, {"STEPS", "40"}});
  s.wait_for_step(3);
  job::worker_settings observer;  // what `job_server status` does
  observer.port = s.server.port();
  observer.secret = secret;
  observer.info.host = "status";
  observer.info.accelerators = job::job_server::observer_mark;
  observer.heartbeat = 0ms;
  testing::internal::CaptureStderr();  // the server's log
  const std::string text = job::worker_client(observer).status();
  std::this_thread::sleep_for(300ms);  // the server reads the observer's hang-up
  const std::string log = testing::internal::GetCapturedStderr();
  // A status query that hangs up is no event (a black-box test: each query logged a
  // worker's "closed the connection").
  EXPECT_EQ(log.find("(status): closed the connection"), std::string::npos) << log;
  EXPECT_NE(text.find("generation 1 running, 2 ranks"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 0  worker"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1  worker"), std::string::npos) << text;
  EXPECT_EQ(text.find("waiting"), std::string::npos) << text;  // the observer is no worker
  EXPECT_EQ(first.wait(), 0) << first.output;
  EXPECT_EQ(second.wait(), 0) << second.output;
}

// A cluster description puts hosts on switches in an order of its own: ranks follow it,
// switch by switch, and the workers run HDRM on the BiGraph their assignment describes.
TEST(job_server, ranks_follow_the_cluster_description_and_run_hdrm_on_its_bigraph) {
  auto settings = group_of(4, 4);
  settings.cluster = {{"h3", 0}, {"h1", 0}, {"h2", 1}, {"h0", 1}};
  running_server s(settings);
  const auto r = run_workers(4, s.server.port(), {{"TARGET", "4"}, {"HOST_FROM_RANK", "1"}, {"USE_BIGRAPH", "1"}});
  EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  EXPECT_EQ(done_lines(r, "rank 0 of 4 on h3,"), 1) << test::all_output(r);
  EXPECT_EQ(done_lines(r, "rank 1 of 4 on h1,"), 1) << test::all_output(r);
  EXPECT_EQ(done_lines(r, "rank 2 of 4 on h2,"), 1) << test::all_output(r);
  EXPECT_EQ(done_lines(r, "rank 3 of 4 on h0,"), 1) << test::all_output(r);
  EXPECT_EQ(done_lines(r, "DONE generation 1 size 4: 5 steps exact"), 4) << test::all_output(r);
}

// Two workers that declare the same speed start with equal batches; one then measures a
// third of the other's throughput, and the server re-forms the group with batches that
// follow it (b_i = B·s_i/Σs), and keeps them.
TEST(job_server, a_throttled_worker_is_rebalanced_to_a_proportionally_smaller_batch) {
  auto settings = group_of(2, 2);
  settings.samples = 1000;
  settings.global_batch = 100;
  settings.rebalance_every = 300ms;
  settings.rebalance_confirmations = 1;  // these 15 steps are over before a second check
  running_server s(settings);
  lone_worker slow(s.server.port(), {{"TARGET", "2"}, {"STEPS", "15"}, {"PER_SAMPLE_US", "600"}});
  const auto r = run_workers(1, s.server.port(), {{"TARGET", "2"}, {"STEPS", "15"}, {"PER_SAMPLE_US", "200"}});
  EXPECT_EQ(slow.wait(), 0) << slow.output;
  EXPECT_NE(slow.output.find("generation 1: rank"), std::string::npos) << slow.output;
  EXPECT_NE(slow.output.find(", batch 50, shard"), std::string::npos) << slow.output;
  EXPECT_NE(slow.output.find("generation 2: rank"), std::string::npos) << slow.output;
  EXPECT_NE(slow.output.find(", batch 25, shard"), std::string::npos) << slow.output;
  EXPECT_NE(slow.output.find("DONE generation 2 size 2: 15 steps exact"), std::string::npos) << slow.output;
  EXPECT_NE(r.output[0].find(", batch 75, shard"), std::string::npos) << test::all_output(r);
  EXPECT_NE(r.output[0].find("DONE generation 2 size 2: 15 steps exact"), std::string::npos) << test::all_output(r);
}

// A measurement that swings at every check (a busy neighbour) does not re-form the
// generation; an imbalance at two checks in a row does, and a balanced check in between
// starts the count again.
TEST(job_server, an_imbalance_re_forms_only_once_confirmed_at_checks_in_a_row) {
  job::imbalance_streak two{2};
  EXPECT_FALSE(two.confirm(true));
  EXPECT_FALSE(two.confirm(false));
  EXPECT_FALSE(two.confirm(true));
  EXPECT_FALSE(two.confirm(false)) << "alternating checks never confirm";
  EXPECT_FALSE(two.confirm(true));
  EXPECT_TRUE(two.confirm(true));
  job::imbalance_streak one{1};
  EXPECT_TRUE(one.confirm(true));
  EXPECT_FALSE(one.confirm(false));
  EXPECT_EQ(job::server_settings{}.rebalance_confirmations, 2);
}

/// A raw connection that sends `bytes` (after reading the challenge) and reports whether
/// the server then closed it.
bool closed_after(std::uint16_t port, const std::vector<std::byte>& bytes, bool read_challenge = true) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket sock(io);
  sock.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  std::array<std::byte, 64> buf{};
  boost::system::error_code ec;
  if (read_challenge) boost::asio::read(sock, boost::asio::buffer(buf.data(), job::header_bytes + job::nonce_bytes), ec);
  if (!bytes.empty()) boost::asio::write(sock, boost::asio::buffer(bytes), ec);
  std::vector<std::byte> rest(4096);
  for (int k = 0; k < 100; ++k) {  // read until EOF: the server closed it
    sock.read_some(boost::asio::buffer(rest), ec);
    if (ec) return ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset;
  }
  return false;
}

TEST(job_server, bad_and_unauthenticated_clients_are_rejected_while_the_group_works) {
  auto settings = group_of(3, 3);
  settings.hello_deadline = 500ms;
  running_server s(settings);
  std::thread group([&] {
    const auto r = run_workers(3, s.server.port(), {{"TARGET", "3"}, {"STEPS", "20"}});
    EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
    EXPECT_EQ(done_lines(r, "DONE generation 1 size 3: 20 steps exact"), 3) << test::all_output(r);
  });
  const std::uint16_t port = s.server.port();
  auto wrong_mac = job::encode(job::hello{{}, job::worker_info{"intruder", "intruder:1", 0, 0, 1}});
  EXPECT_TRUE(closed_after(port, wrong_mac));
  auto garbage = std::vector<std::byte>(64, std::byte{0x5a});
  EXPECT_TRUE(closed_after(port, garbage));
  auto oversized = job::encode(job::reject{"x"});
  const std::uint32_t huge = 0x40000000;
  std::memcpy(oversized.data(), &huge, 4);
  EXPECT_TRUE(closed_after(port, oversized));
  EXPECT_TRUE(closed_after(port, job::encode(job::store_get{1, "g1/x", 10})));  // before authenticating
  EXPECT_TRUE(closed_after(port, {}));  // silent past the hello deadline
  group.join();
}

}  // namespace
}  // namespace mimatrix
