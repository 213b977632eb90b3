// The job server's load: N simulated workers (worker_client objects of this process) join
// a real `job_server serve` process, form one generation and heartbeat with statistics;
// the server's CPU time and resident memory come from /proc over the measured interval.
//
//   job_server_bench [workers=256] [seconds=10] [heartbeat_ms=100]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../examples/strict_number.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "worker.hpp"

namespace {

using namespace std::chrono_literals;

/// utime + stime of `pid` in seconds, and its VmRSS in MiB.
std::pair<double, double> usage_of(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  std::istringstream fields(line.substr(line.rfind(')') + 2));
  std::string f;
  double ticks = 0;
  for (int k = 3; k <= 15 && fields >> f; ++k)
    if (k == 14 || k == 15) ticks += std::stod(f);
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  double rss_mib = 0;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) rss_mib = std::stod(line.substr(6)) / 1024;
  return {ticks / double(::sysconf(_SC_CLK_TCK)), rss_mib};
}

}  // namespace

int main(int argc, char** argv) {
  int workers = 256, seconds = 10, beat_ms = 100;
  try {
    namespace ex = mimatrix::examples;
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h")
        return std::printf("usage: job_server_bench [workers=256] [seconds=10] [heartbeat_ms=100]\n"), 0;
    if (argc > 4) throw std::invalid_argument("at most three arguments");
    if (argc > 1) workers = int(ex::parse_integer("workers", argv[1], 1, 65536));
    if (argc > 2) seconds = int(ex::parse_integer("seconds", argv[2], 1, 86400));
    if (argc > 3) beat_ms = int(ex::parse_integer("heartbeat_ms", argv[3], 1, 600000));
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "job_server_bench: %s\nusage: job_server_bench [workers=256] [seconds=10] [heartbeat_ms=100]\n",
                 e.what());
    return 2;
  }
  const std::string secret = "bench-secret";
  const int port = 20000 + int(::getpid() % 20000);
  const pid_t server = ::fork();
  if (server == 0) {
    ::setenv("MIMATRIX_JOB_SECRET", secret.c_str(), 1);
    // A global batch with a sample for every worker (the default, 128, would form 128 ranks).
    const std::string n = std::to_string(workers), p = std::to_string(port), b = std::to_string(std::max(workers, 128));
    ::execl(MIMATRIX_JOB_SERVER_BINARY, "job_server", "serve", "--port", p.c_str(), "--workers", n.c_str(), "--batch",
            b.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::this_thread::sleep_for(300ms);
  std::vector<std::unique_ptr<mimatrix::job::worker_client>> clients;
  for (int w = 0; w < workers; ++w) {
    mimatrix::job::worker_settings s;
    s.port = std::uint16_t(port);
    s.secret = secret;
    s.info.host = "node" + std::to_string(w / 8);
    s.heartbeat = std::chrono::milliseconds(beat_ms);
    clients.push_back(std::make_unique<mimatrix::job::worker_client>(s));
  }
  for (auto& c : clients) c->next_assignment(60s);
  const auto [cpu0, rss0] = usage_of(server);
  const auto t0 = std::chrono::steady_clock::now();
  for (int second = 0; second < seconds; ++second) {
    for (auto& c : clients)
      c->report(mimatrix::job::heartbeat{1, std::uint64_t(second * 10), 120.0, 30.0, 9.5, 0.5, 250.0});
    std::this_thread::sleep_for(1s);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto [cpu1, rss1] = usage_of(server);
  const double beats = double(workers) * wall * 1000.0 / beat_ms;
  std::printf("| workers | heartbeat ms | heartbeats/s | server CPU (%% of a core) | CPU us a heartbeat | server RSS MiB |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  std::printf("| %d | %d | %.0f | %.2f | %.1f | %.1f |\n", workers, beat_ms, beats / wall, 100 * (cpu1 - cpu0) / wall,
              1e6 * (cpu1 - cpu0) / beats, rss1);
  clients.clear();
  ::kill(server, SIGTERM);
  ::waitpid(server, nullptr, 0);
  (void)rss0;
  return 0;
}
