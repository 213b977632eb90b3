// job_server: the MiMatrix job server (serve), and a look at a running one (status).
//
//   MIMATRIX_JOB_SECRET=... job_server serve --port 29400 --workers 4 [--min 2] [--form-after-ms 5000]
//                                            [--heartbeat-ms 2000] [--samples 60000] [--batch 128]
//                                            [--http-port 9400 [--http-address 127.0.0.1]] [--state-file F]
//                                            [--rebalance-ms 60000] [--rebalance-confirmations 2]
//                                            [--throughput-half-life-ms MS] [--cluster hosts.txt]
//   MIMATRIX_JOB_SECRET=... job_server status --port 29400 [--address 10.0.0.1]
#include <boost/asio.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>

#include "../strict_number.hpp"
#include "http.hpp"
#include "server.hpp"
#include "worker.hpp"

namespace {

const char* const usage =
    "usage: job_server serve --port P [--address 127.0.0.1] --workers N [--min M] [--form-after-ms 5000]\n"
    "                        [--heartbeat-ms 2000] [--samples 60000] [--batch 128] [--http-port P [--http-address A]]\n"
    "                        [--state-file F] [--rebalance-ms MS] [--rebalance-confirmations 2]\n"
    "                        [--throughput-half-life-ms MS] [--cluster hosts.txt] [--secret-file F]\n"
    "       job_server status --port P [--address 127.0.0.1] [--secret-file F]\n"
    "The shared secret comes from MIMATRIX_JOB_SECRET or --secret-file.\n";

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char* value_after(int& i, int argc, char** argv) {
  if (i + 1 >= argc) throw usage_error(std::string("job_server: ") + argv[i] + " needs a value");
  return argv[++i];
}

/// The flag's value as a whole number in [low, high], or a usage error naming the flag.
long long number_after(int& i, int argc, char** argv, long long low, long long high) {
  const std::string flag = argv[i], v = value_after(i, argc, argv);
  try {
    return mimatrix::examples::parse_integer(flag, v, low, high);
  } catch (const std::invalid_argument& e) {
    throw usage_error(std::string("job_server: ") + e.what());
  }
}

int serve(int argc, char** argv) {
  mimatrix::job::server_settings s;
  std::string secret_file;
  std::optional<std::uint16_t> http_port;  // no monitoring unless asked for
  mimatrix::job::http_settings http;
  bool workers_given = false;
  std::optional<int> minimum;  // --min may come before --workers
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") return std::fputs(usage, stdout), 0;
    if (a == "--port") s.port = std::uint16_t(number_after(i, argc, argv, 0, 65535));
    else if (a == "--address") s.address = value_after(i, argc, argv);
    else if (a == "--http-port") http_port = std::uint16_t(number_after(i, argc, argv, 0, 65535));
    else if (a == "--http-address") http.address = value_after(i, argc, argv);
    else if (a == "--workers") s.expected = s.minimum = int(number_after(i, argc, argv, 1, 1 << 20)), workers_given = true;
    else if (a == "--min") minimum = int(number_after(i, argc, argv, 1, 1 << 20));
    else if (a == "--form-after-ms") s.form_after = std::chrono::milliseconds(number_after(i, argc, argv, 0, 1ll << 40));
    else if (a == "--heartbeat-ms") s.heartbeat_deadline = std::chrono::milliseconds(number_after(i, argc, argv, 1, 1ll << 40));
    else if (a == "--samples") s.samples = std::uint64_t(number_after(i, argc, argv, 1, 1ll << 62));
    else if (a == "--batch") s.global_batch = std::uint32_t(number_after(i, argc, argv, 1, 0xffffffffll));
    else if (a == "--secret-file") secret_file = value_after(i, argc, argv);
    else if (a == "--state-file") s.state_file = value_after(i, argc, argv);
    else if (a == "--cluster") s.cluster = mimatrix::job::load_cluster(value_after(i, argc, argv));
    else if (a == "--rebalance-ms") s.rebalance_every = std::chrono::milliseconds(number_after(i, argc, argv, 0, 1ll << 40));
    else if (a == "--rebalance-confirmations") s.rebalance_confirmations = int(number_after(i, argc, argv, 1, 1 << 20));
    else if (a == "--throughput-half-life-ms")
      s.throughput_half_life = std::chrono::milliseconds(number_after(i, argc, argv, 0, 1ll << 40));
    else throw usage_error("job_server serve: unknown option " + a);
  }
  if (!workers_given) throw usage_error("job_server serve: --workers N is required");
  if (minimum) {
    if (*minimum > s.expected)
      throw usage_error("job_server serve: --min " + std::to_string(*minimum) + " is more than --workers " +
                        std::to_string(s.expected));
    s.minimum = *minimum;
  }
  if (s.samples < s.global_batch)
    throw usage_error("job_server serve: --samples " + std::to_string(s.samples) + " is less than --batch " +
                      std::to_string(s.global_batch));
  s.secret = mimatrix::job::load_secret(secret_file);
  boost::asio::io_context io;
  std::optional<mimatrix::job::job_server> server;
  try {
    server.emplace(io, s);
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error("job_server: cannot listen on the job port " + std::to_string(s.port) + " (" +
                             s.address + "): " + e.code().message());
  }
  std::optional<mimatrix::job::http_monitor> monitor;
  if (http_port) try {
    monitor.emplace(io, *http_port, [&] { return server->view(); }, http);
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error("job_server: cannot listen on the HTTP port " + std::to_string(*http_port) + " (" +
                             http.address + "): " + e.code().message());
  }
  if (monitor) {
    // Every address: the line gives one to open here, and says that others reach it too.
    if (http.address == "0.0.0.0")
      std::printf("job_server: monitoring on every address (0.0.0.0), here http://127.0.0.1:%u/\n",
                  unsigned(monitor->port()));
    else
      std::printf("job_server: monitoring on http://%s:%u/\n", http.address.c_str(), unsigned(monitor->port()));
  }
  boost::asio::signal_set stop(io, SIGINT, SIGTERM);
  stop.async_wait([&](auto, int) { io.stop(); });
  std::printf("job_server: listening on port %u of %s for %d workers\n", unsigned(server->port()), s.address.c_str(),
              s.expected);
  std::fflush(stdout);
  io.run();
  return 0;
}

int status(int argc, char** argv) {
  mimatrix::job::worker_settings s;
  std::string secret_file;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") return std::fputs(usage, stdout), 0;
    if (a == "--port") s.port = std::uint16_t(number_after(i, argc, argv, 0, 65535));
    else if (a == "--address") s.address = value_after(i, argc, argv);
    else if (a == "--secret-file") secret_file = value_after(i, argc, argv);
    else throw usage_error("job_server status: unknown option " + a);
  }
  s.secret = mimatrix::job::load_secret(secret_file);
  s.info.host = "status";
  s.info.accelerators = mimatrix::job::job_server::observer_mark;
  s.heartbeat = std::chrono::milliseconds(0);
  mimatrix::job::worker_client client(s);
  std::fputs(client.status().c_str(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string command = argc > 1 ? argv[1] : "";
    if (command == "serve") return serve(argc, argv);
    if (command == "status") return status(argc, argv);
    if (command == "--help" || command == "-h" || command == "help") return std::fputs(usage, stdout), 0;
    std::fputs(usage, stderr);
    return 2;
  } catch (const usage_error& e) {
    std::fprintf(stderr, "%s\n%s", e.what(), usage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
