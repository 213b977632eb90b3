// job_server: the MiMatrix job server (serve), and a look at a running one (status).
//
//   MIMATRIX_JOB_SECRET=... job_server serve --port 29400 --workers 4 [--min 2] [--form-after-ms 5000]
//                                            [--heartbeat-ms 2000] [--samples 60000] [--batch 256]
//                                            [--http-port 9400 [--http-address 127.0.0.1]] [--state-file F]
//                                            [--rebalance-ms 60000] [--rebalance-confirmations 2] [--cluster hosts.txt]
//   MIMATRIX_JOB_SECRET=... job_server status --port 29400 [--address 10.0.0.1]
#include <boost/asio.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>

#include "http.hpp"
#include "server.hpp"
#include "worker.hpp"

namespace {

const char* value_after(int& i, int argc, char** argv) {
  if (i + 1 >= argc) throw std::runtime_error(std::string("job_server: ") + argv[i] + " needs a value");
  return argv[++i];
}

int serve(int argc, char** argv) {
  mimatrix::job::server_settings s;
  std::string secret_file;
  std::optional<std::uint16_t> http_port;  // no monitoring unless asked for
  mimatrix::job::http_settings http;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--port") s.port = std::uint16_t(std::stoi(value_after(i, argc, argv)));
    else if (a == "--http-port") http_port = std::uint16_t(std::stoi(value_after(i, argc, argv)));
    else if (a == "--http-address") http.address = value_after(i, argc, argv);
    else if (a == "--workers") s.expected = s.minimum = std::stoi(value_after(i, argc, argv));
    else if (a == "--min") s.minimum = std::stoi(value_after(i, argc, argv));
    else if (a == "--form-after-ms") s.form_after = std::chrono::milliseconds(std::stol(value_after(i, argc, argv)));
    else if (a == "--heartbeat-ms") s.heartbeat_deadline = std::chrono::milliseconds(std::stol(value_after(i, argc, argv)));
    else if (a == "--samples") s.samples = std::stoull(value_after(i, argc, argv));
    else if (a == "--batch") s.global_batch = std::uint32_t(std::stoul(value_after(i, argc, argv)));
    else if (a == "--secret-file") secret_file = value_after(i, argc, argv);
    else if (a == "--state-file") s.state_file = value_after(i, argc, argv);
    else if (a == "--cluster") s.cluster = mimatrix::job::load_cluster(value_after(i, argc, argv));
    else if (a == "--rebalance-ms") s.rebalance_every = std::chrono::milliseconds(std::stol(value_after(i, argc, argv)));
    else if (a == "--rebalance-confirmations") s.rebalance_confirmations = std::stoi(value_after(i, argc, argv));
    else throw std::runtime_error("job_server serve: unknown option " + a);
  }
  s.secret = mimatrix::job::load_secret(secret_file);
  boost::asio::io_context io;
  mimatrix::job::job_server server(io, s);
  std::optional<mimatrix::job::http_monitor> monitor;
  if (http_port) {
    monitor.emplace(io, *http_port, [&] { return server.view(); }, http);
    std::printf("job_server: monitoring on http://%s:%u/\n",
                http.address == "0.0.0.0" ? "127.0.0.1" : http.address.c_str(), unsigned(monitor->port()));
  }
  boost::asio::signal_set stop(io, SIGINT, SIGTERM);
  stop.async_wait([&](auto, int) { io.stop(); });
  std::printf("job_server: listening on port %u for %d workers\n", unsigned(server.port()), s.expected);
  std::fflush(stdout);
  io.run();
  return 0;
}

int status(int argc, char** argv) {
  mimatrix::job::worker_settings s;
  std::string secret_file;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--port") s.port = std::uint16_t(std::stoi(value_after(i, argc, argv)));
    else if (a == "--address") s.address = value_after(i, argc, argv);
    else if (a == "--secret-file") secret_file = value_after(i, argc, argv);
    else throw std::runtime_error("job_server status: unknown option " + a);
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
    std::fprintf(stderr, "usage: job_server serve --port P --workers N [...] | job_server status --port P\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
