// The job server's monitoring: the Prometheus text of a view, exactly, with escaped
// labels; the HTTP endpoints on loopback (404, 405, oversized and idle requests refused
// while the server keeps serving); a real Prometheus scraping it, and headless Chromium
// rendering the status page, where those programs are installed.
#include "http.hpp"
#include "metrics.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "server.hpp"
#include "worker.hpp"

namespace mimatrix::job {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace fs = std::filesystem;
const char* const secret = "monitoring-test-secret";

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l == line) return true;
  return false;
}

server_view hand_built() {
  server_view v;
  v.generation = 3;
  v.completed_step = 41;
  v.running = true;
  v.generations_revoked = 2;
  v.workers_rejected = 5;
  worker_view a;
  a.id = 1;
  a.host = "node-a";
  a.member = true;
  a.rank = 0;
  a.local_batch = 128;
  a.last.generation = 3;
  a.last.step = 42;
  a.last.step_ms = 20.5;
  a.last.allreduce_ms = 1.25;
  a.last.busbw_gbps = 9.75;
  a.last.loss = 0.125;
  a.seen_ms_ago = 12;
  worker_view b;
  b.id = 7;
  b.host = "rack \"7\"\\b\nc";
  b.member = false;
  b.seen_ms_ago = std::nan("");
  v.workers = {a, b};
  return v;
}

TEST(PrometheusText, HoldsEveryMetricWithHelpTypeAndValue) {
  const std::string t = prometheus_text(hand_built());
  for (const char* line : {"# HELP mimatrix_job_generation The generation the server formed last (0: none yet).",
                           "# TYPE mimatrix_job_generation gauge", "mimatrix_job_generation 3",
                           "# TYPE mimatrix_job_running gauge", "mimatrix_job_running 1",
                           "# TYPE mimatrix_job_completed_step gauge", "mimatrix_job_completed_step 41",
                           "# TYPE mimatrix_job_workers gauge", "mimatrix_job_workers 2",
                           "# TYPE mimatrix_job_generations_revoked_total counter",
                           "mimatrix_job_generations_revoked_total 2",
                           "# TYPE mimatrix_job_rejected_connections_total counter",
                           "mimatrix_job_rejected_connections_total 5"})
    EXPECT_TRUE(has_line(t, line)) << "no line '" << line << "' in\n" << t;
  const std::string a = R"({worker="1",host="node-a",rank="0",member="true"})";
  for (const std::string& line :
       {"mimatrix_job_worker_step" + a + " 42", "mimatrix_job_worker_step_ms" + a + " 20.5",
        "mimatrix_job_worker_allreduce_ms" + a + " 1.25", "mimatrix_job_worker_busbw_gbps" + a + " 9.75",
        "mimatrix_job_worker_loss" + a + " 0.125", "mimatrix_job_worker_local_batch" + a + " 128",
        "mimatrix_job_worker_seen_ms_ago" + a + " 12", std::string("# TYPE mimatrix_job_worker_step gauge")})
    EXPECT_TRUE(has_line(t, line)) << "no line '" << line << "' in\n" << t;
  // Every family is declared once, before its samples; every line ends with a newline.
  for (const char* name : {"mimatrix_job_worker_step ", "mimatrix_job_worker_loss ", "mimatrix_job_generation "}) {
    const auto help = t.find(std::string("# HELP ") + name), type = t.find(std::string("# TYPE ") + name);
    EXPECT_LT(help, type);
    EXPECT_EQ(t.find(std::string("# TYPE ") + name, type + 1), std::string::npos);
  }
  EXPECT_EQ(t.back(), '\n');
}

TEST(PrometheusText, EscapesLabelValues) {
  const std::string t = prometheus_text(hand_built());
  const std::string b = R"({worker="7",host="rack \"7\"\\b\nc",rank="0",member="false"})";
  EXPECT_TRUE(has_line(t, "mimatrix_job_worker_step" + b + " 0")) << t;
  EXPECT_TRUE(has_line(t, "mimatrix_job_worker_seen_ms_ago" + b + " NaN")) << t;
  EXPECT_EQ(detail::prometheus_label("a\\b\"c\nd"), R"(a\\b\"c\nd)");
  EXPECT_EQ(detail::prometheus_label("bad \xff utf-8"), "bad \xef\xbf\xbd utf-8");  // scrapes need UTF-8
  EXPECT_EQ(detail::prometheus_label("caf\xc3\xa9"), "caf\xc3\xa9");
}

TEST(StatusJson, EscapesStringsAndHasNoNaN) {
  const std::string j = status_json(hand_built());
  EXPECT_NE(j.find(R"("host":"rack \"7\"\\b\nc")"), std::string::npos) << j;
  EXPECT_NE(j.find(R"("generation":3,"running":true,"completed_step":41)"), std::string::npos) << j;
  EXPECT_NE(j.find(R"("seen_ms_ago":null)"), std::string::npos) << j;
  EXPECT_EQ(j.find("NaN"), std::string::npos) << j;
  EXPECT_EQ(detail::json_string(std::string("a\x01") + "b"), R"("a\u0001b")");
  // The throughput of the members: node-a's batch over its step, 128 / 20.5 ms.
  EXPECT_NE(j.find("\"throughput\":" + detail::number(128 * 1000.0 / 20.5)), std::string::npos) << j;
}

TEST(StatusPage, IsSelfContainedAndPolls) {
  const std::string page = status_page_html();
  EXPECT_NE(page.find("id=\"workers\""), std::string::npos);
  EXPECT_NE(page.find("fetch(\"/status.json\""), std::string::npos);
  EXPECT_NE(page.find("<canvas"), std::string::npos);
  EXPECT_EQ(page.find("http://"), std::string::npos);  // no external resources
  EXPECT_EQ(page.find("https://"), std::string::npos);
  EXPECT_EQ(page.find(" src="), std::string::npos);
}

// ---------------------------------------------------------------------------------------
// Over HTTP on loopback.

struct reply {
  boost::system::error_code error;  // of the exchange; the reply is empty then
  unsigned status = 0;
  std::string content_type, body;
  int replies = 0;  // read on the connection; the fields above are of the last
};

/// Writes `request` (raw bytes) to 127.0.0.1:port and reads `count` responses with Beast,
/// all within `deadline`.
reply exchange(std::uint16_t port, std::string request, std::chrono::milliseconds deadline = 5s, int count = 1) {
  asio::io_context io;
  auto run = [&]() -> asio::awaitable<reply> {
    reply out;
    beast::tcp_stream stream(co_await asio::this_coro::executor);
    stream.expires_after(deadline);
    auto& ec = out.error;
    co_await stream.async_connect(tcp::endpoint(asio::ip::address_v4::loopback(), port),
                                  asio::redirect_error(asio::use_awaitable, ec));
    if (!ec) co_await asio::async_write(stream, asio::buffer(request), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return out;
    beast::flat_buffer buffer;
    for (; out.replies < count; ++out.replies) {
      http::response_parser<http::string_body> parser;
      parser.body_limit(64 * 1024 * 1024);
      co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return out;
      out.status = parser.get().result_int();
      out.content_type = std::string(parser.get()[http::field::content_type]);
      out.body = parser.get().body();
    }
    co_return out;
  };
  auto result = asio::co_spawn(io, run(), asio::use_future);
  io.run_for(deadline + 1s);
  if (result.wait_for(0s) != std::future_status::ready) {
    reply late;
    late.error = asio::error::timed_out;
    return late;
  }
  return result.get();
}

reply get(std::uint16_t port, const std::string& target, std::chrono::milliseconds deadline = 5s) {
  return exchange(port, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", deadline);
}

/// A job server with its monitor on a thread, and workers from `hosts` in one generation
/// that report statistics.
struct monitored_group {
  explicit monitored_group(const std::vector<std::string>& hosts, http_settings hs = {})
      : server(io, settings(int(hosts.size()))), monitor(io, 0, [this] { return server.view(); }, hs),
        thread([this] { io.run(); }) {
    for (const auto& host : hosts) {
      worker_settings w;
      w.port = server.port();
      w.secret = secret;
      w.info.host = host;
      w.heartbeat = 50ms;
      workers.push_back(std::make_unique<worker_client>(w));
    }
    for (std::size_t i = 0; i < workers.size(); ++i) {
      const assignment a = workers[i]->next_assignment(10s);
      generation = a.generation;
      report(i, 7, 20.0 + double(a.rank), a.local_batch);
    }
    metrics_with("\nmimatrix_job_completed_step 7\n");  // every member's step 7 arrived
  }
  ~monitored_group() {
    workers.clear();
    io.stop();
    thread.join();
  }
  static server_settings settings(int n) {
    server_settings s;
    s.secret = secret;
    s.expected = s.minimum = n;
    s.quiet = true;
    return s;
  }
  void report(std::size_t worker, std::uint64_t step, double step_ms, std::uint32_t batch) {
    heartbeat h;
    h.generation = generation;
    h.step = step;
    h.step_ms = step_ms;
    h.allreduce_ms = step_ms / 4;
    h.busbw_gbps = 12.5;
    h.loss = 2.0 / double(step);
    h.throughput = step_ms > 0 ? batch * 1000.0 / step_ms : 0;
    workers[worker]->report(h);
  }
  /// Waits until /metrics holds `text` (the heartbeats are 50 ms apart).
  std::string metrics_with(const std::string& text, std::chrono::milliseconds within = 5s) {
    const auto until = std::chrono::steady_clock::now() + within;
    std::string last;
    while (std::chrono::steady_clock::now() < until) {
      last = get(monitor_port(), "/metrics").body;
      if (last.find(text) != std::string::npos) return last;
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "/metrics did not show '" << text << "' within " << within.count() << " ms:\n" << last;
    return last;
  }
  std::uint16_t monitor_port() const { return port; }

  asio::io_context io;
  job_server server;
  http_monitor monitor;
  std::uint16_t port = monitor.port();
  std::thread thread;
  std::vector<std::unique_ptr<worker_client>> workers;
  std::uint64_t generation = 0;
};

TEST(HttpMonitor, ServesMetricsOfRegisteredWorkers) {
  monitored_group g({"node-a", "node-b"});
  const reply r = get(g.monitor_port(), "/metrics");
  ASSERT_FALSE(r.error) << r.error.message();
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_TRUE(has_line(r.body, "mimatrix_job_workers 2")) << r.body;
  EXPECT_TRUE(has_line(r.body, "mimatrix_job_generation 1")) << r.body;
  EXPECT_TRUE(has_line(r.body, "mimatrix_job_running 1")) << r.body;
  EXPECT_TRUE(has_line(r.body, R"(mimatrix_job_worker_step{worker="1",host="node-a",rank="0",member="true"} 7)"))
      << r.body;
  EXPECT_TRUE(has_line(r.body, R"(mimatrix_job_worker_step_ms{worker="2",host="node-b",rank="1",member="true"} 21)"))
      << r.body;
  EXPECT_TRUE(has_line(r.body, "mimatrix_job_completed_step 7")) << r.body;

  const reply json = get(g.monitor_port(), "/status.json");
  EXPECT_EQ(json.status, 200u);
  EXPECT_EQ(json.content_type, "application/json");
  EXPECT_NE(json.body.find(R"("host":"node-b")"), std::string::npos) << json.body;
}

TEST(HttpMonitor, ServesThePageAndRefusesTheRest) {
  monitored_group g({"node-a"});
  const reply page = get(g.monitor_port(), "/");
  ASSERT_FALSE(page.error) << page.error.message();
  EXPECT_EQ(page.status, 200u);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("id=\"workers\""), std::string::npos);

  EXPECT_EQ(get(g.monitor_port(), "/nope").status, 404u);
  EXPECT_EQ(get(g.monitor_port(), "/metrics/../etc/passwd").status, 404u);
  const reply post = exchange(g.monitor_port(),
                              "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi");
  EXPECT_EQ(post.status, 405u);
  const reply garbage = exchange(g.monitor_port(), "NOT HTTP AT ALL\r\n\r\n");
  EXPECT_EQ(garbage.status, 400u);
}

TEST(HttpMonitor, KeepsAliveForSeveralRequests) {
  monitored_group g({"node-a"});
  const std::string one = "GET /status.json HTTP/1.1\r\nHost: x\r\n\r\n";
  // Three pipelined requests on one connection, the last asking to close: three replies,
  // then the end of the stream (a fourth read fails).
  const std::string last = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const reply r = exchange(g.monitor_port(), one + one + last, 5s, 3);
  EXPECT_FALSE(r.error) << r.error.message();
  EXPECT_EQ(r.replies, 3);
  EXPECT_EQ(r.status, 200u);
  EXPECT_TRUE(has_line(r.body, "mimatrix_job_workers 1"));
  const reply closed = exchange(g.monitor_port(), one + last, 5s, 3);
  EXPECT_EQ(closed.replies, 2);
  EXPECT_EQ(closed.error, http::error::end_of_stream) << closed.error.message();
}

TEST(HttpMonitor, RefusesOversizedRequestsAndGoesOn) {
  monitored_group g({"node-a"});
  const std::string huge_header = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Padding: " + std::string(20000, 'p') + "\r\n\r\n";
  const reply header = exchange(g.monitor_port(), huge_header);
  EXPECT_EQ(header.status, 431u) << header.error.message();

  const std::string huge_body =
      "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\n\r\n" + std::string(20000, 'b');
  const reply body = exchange(g.monitor_port(), huge_body);
  EXPECT_EQ(body.status, 413u) << body.error.message();

  const reply after = get(g.monitor_port(), "/metrics");
  EXPECT_EQ(after.status, 200u) << after.error.message();
  EXPECT_TRUE(has_line(after.body, "mimatrix_job_workers 1"));
}

TEST(HttpMonitor, ClosesIdleAndSlowConnections) {
  http_settings hs;
  hs.deadline = 300ms;
  monitored_group g({"node-a"}, hs);
  const auto start = std::chrono::steady_clock::now();
  // Half a request that never ends: the server gives up after its deadline.
  const reply slow = exchange(g.monitor_port(), "GET /metrics HTTP/1.1\r\nHost:", 5s);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(slow.status, 0u);
  EXPECT_NE(slow.error, asio::error::timed_out) << "the server did not close the connection";
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3s);
  EXPECT_EQ(get(g.monitor_port(), "/status.json").status, 200u);
}

TEST(HttpMonitor, BoundsConnectionsAtOnce) {
  http_settings hs;
  hs.connections = 2;
  hs.deadline = 2s;  // also bounds the blocking reads below: the server closes by then
  monitored_group g({"node-a"}, hs);
  // Two keep-alive connections, each served once and so surely counted.
  asio::io_context io;
  std::vector<tcp::socket> held;
  for (int k = 0; k < 2; ++k) {
    tcp::socket& s = held.emplace_back(io);
    s.connect(tcp::endpoint(asio::ip::address_v4::loopback(), g.monitor_port()));
    asio::write(s, asio::buffer(std::string("GET /status.json HTTP/1.1\r\nHost: x\r\n\r\n")));
    beast::flat_buffer buffer;
    http::response<http::string_body> r;
    http::read(s, buffer, r);
    ASSERT_EQ(r.result_int(), 200u);
  }
  const reply third = get(g.monitor_port(), "/metrics");
  EXPECT_EQ(third.status, 0u) << "a third connection was served";
  EXPECT_TRUE(third.error);
  held.clear();  // their ends close; the server counts them out
  const auto until = std::chrono::steady_clock::now() + 2s;
  reply again;
  while ((again = get(g.monitor_port(), "/metrics")).status != 200 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(20ms);
  EXPECT_EQ(again.status, 200u) << again.error.message();
}

// ---------------------------------------------------------------------------------------
// Real clients: Prometheus and headless Chromium, where installed.

/// `name` found on PATH, or empty.
std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path p = fs::path(dir.empty() ? "." : dir) / name;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return {};
}

/// A directory removed with everything in it at the end of the scope.
struct temp_dir {
  temp_dir() {
    std::string pattern = (fs::temp_directory_path() / "mimatrix-monitoring-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path = pattern;
  }
  ~temp_dir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  fs::path path;
};

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

/// A program run in its own process group, its output in files; the whole group killed
/// if still running when it goes out of scope.
struct child {
  child(const std::vector<std::string>& argv, const fs::path& out, const fs::path& err) {
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&files, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int rc = ::posix_spawn(&pid, argv[0].c_str(), &files, &attr, args.data(), environ);
    posix_spawn_file_actions_destroy(&files);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
    group = pid;
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;
  ~child() { stop(); }

  /// Its wait status once it ended within `within`, else nothing.
  std::optional<int> wait(std::chrono::milliseconds within) {
    const auto until = std::chrono::steady_clock::now() + within;
    while (pid > 0) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        ::kill(-group, SIGKILL);  // helpers it left behind (Chromium's zygote and renderers)
        return status;
      }
      if (std::chrono::steady_clock::now() >= until) return std::nullopt;
      std::this_thread::sleep_for(20ms);
    }
    return std::nullopt;
  }
  void stop() {
    if (pid <= 0) return;
    ::kill(-group, SIGTERM);
    if (!wait(5s)) {
      ::kill(-group, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }

  pid_t pid = -1, group = -1;
};

std::uint16_t free_port() {
  asio::io_context io;
  tcp::acceptor a(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  return a.local_endpoint().port();
}

TEST(RealClients, PrometheusScrapesTheWorkers) {
  const std::string prometheus = find_program("prometheus");
  if (prometheus.empty()) GTEST_SKIP() << "prometheus is not installed (Debian package prometheus)";
  // A host name that needs escaping: Prometheus fails the whole scrape on a bad label.
  monitored_group g({"node-a", "rack \"7\"\\b"});
  temp_dir dir;
  const std::uint16_t web = free_port();
  std::ofstream(dir.path / "prometheus.yml") << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                                             << "scrape_configs:\n  - job_name: mimatrix\n    static_configs:\n"
                                             << "      - targets: ['127.0.0.1:" << g.monitor_port() << "']\n";
  child p({prometheus, "--config.file=" + (dir.path / "prometheus.yml").string(),
           "--storage.tsdb.path=" + (dir.path / "data").string(), "--web.listen-address=127.0.0.1:" + std::to_string(web),
           "--log.level=warn"},
          dir.path / "prometheus.out", dir.path / "prometheus.log");
  const auto until = std::chrono::steady_clock::now() + 30s;
  std::string answer, targets;
  bool seen = false, down = false;
  while (!seen && !down && std::chrono::steady_clock::now() < until && !p.wait(0ms)) {
    answer = get(web, "/api/v1/query?query=mimatrix_job_worker_step", 2s).body;
    seen = answer.find(R"("worker":"2")") != std::string::npos;
    targets = get(web, "/api/v1/targets", 2s).body;
    down = targets.find(R"("health":"down")") != std::string::npos;  // a failed scrape: its lastError says why
    if (!seen && !down) std::this_thread::sleep_for(250ms);
  }
  ASSERT_TRUE(seen) << "Prometheus did not show the workers; its last answer:\n"
                    << answer << "\nits targets:\n" << targets << "\nits log:\n"
                    << read_all(dir.path / "prometheus.log");
  EXPECT_NE(answer.find(R"("host":"node-a")"), std::string::npos) << answer;
  EXPECT_NE(answer.find(R"("host":"rack \"7\"\\b")"), std::string::npos) << answer;
  EXPECT_NE(answer.find(R"("7"])"), std::string::npos) << answer;  // the step, as Prometheus writes values
  const std::string up = get(web, "/api/v1/query?query=up", 2s).body;
  EXPECT_NE(up.find(R"("value":[)"), std::string::npos) << up;
  EXPECT_NE(up.find(R"("1"])"), std::string::npos) << "the scrape failed: " << up;
}

TEST(RealClients, ChromiumRendersTheStatusPage) {
  const std::string chromium = find_program("chromium");
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (Debian package chromium)";
  monitored_group g({"node-a", "node-b"});
  // Statistics that move while the page polls, so the chart has a line to draw.
  std::atomic<bool> done{false};
  std::thread training([&] {
    for (std::uint64_t step = 8; !done; ++step) {
      for (std::size_t w = 0; w < g.workers.size(); ++w)
        g.report(w, step, 20 + 6 * std::sin(double(step) / 3) + 3 * double(w), 128);
      std::this_thread::sleep_for(30ms);
    }
  });
  struct joiner {
    std::atomic<bool>& done;
    std::thread& t;
    ~joiner() {
      done = true;
      t.join();
    }
  } join_training{done, training};
  temp_dir dir;
  const std::string url = "http://127.0.0.1:" + std::to_string(g.monitor_port()) + "/";
  const std::vector<std::string> common = {chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                                           "--disable-dev-shm-usage", "--no-first-run",
                                           "--user-data-dir=" + (dir.path / "profile").string()};
  auto run = [&](std::vector<std::string> extra, const std::string& out) {
    std::vector<std::string> argv = common;
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(url);
    child c(argv, dir.path / out, dir.path / "chromium.log");
    const auto status = c.wait(60s);
    return status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
  };

  ASSERT_TRUE(run({"--dump-dom", "--virtual-time-budget=3000"}, "dom.html"))
      << read_all(dir.path / "chromium.log");
  const std::string dom = read_all(dir.path / "dom.html");
  EXPECT_NE(dom.find("id=\"workers\""), std::string::npos) << dom;
  EXPECT_NE(dom.find("class=\"worker\""), std::string::npos) << "no worker rows:\n" << dom;
  EXPECT_NE(dom.find("<td>node-a</td>"), std::string::npos) << dom;
  EXPECT_NE(dom.find("<td>node-b</td>"), std::string::npos) << dom;

  const fs::path png = dir.path / "status.png";
  ASSERT_TRUE(run({"--screenshot=" + png.string(), "--window-size=1000,700", "--virtual-time-budget=30000",
                   "--hide-scrollbars"},
                  "screenshot.out"))
      << read_all(dir.path / "chromium.log");
  const std::string image = read_all(png);
  ASSERT_GT(image.size(), 1000u);
  EXPECT_EQ(image.substr(0, 8), "\x89PNG\r\n\x1a\n");
  if (const char* keep = std::getenv("MIMATRIX_JOB_SCREENSHOT")) fs::copy_file(png, keep, fs::copy_options::overwrite_existing);
}

}  // namespace
}  // namespace mimatrix::job
