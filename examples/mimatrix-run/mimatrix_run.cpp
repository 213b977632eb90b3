// mimatrix-run: start N ranks of a program on this machine, as torchrun does on one node.
//   mimatrix-run -n 4 ./train --epochs 3
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "mimatrix/bootstrap/launch.hpp"

namespace {

constexpr const char* usage =
    "usage: mimatrix-run -n N [--hosts H] [--grace SECONDS] [--timeout SECONDS] [-x NAME[=VALUE]]...\n"
    "                    [--no-prefix] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Runs N ranks of PROGRAM on this machine. Each rank gets RANK, WORLD_SIZE, LOCAL_RANK,\n"
    "LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT, so that mimatrix (or any\n"
    "torchrun-style program) can rendezvous; every output line is prefixed with \"[rank] \".\n"
    "\n"
    "  -n, --ranks N        how many ranks to run (required, 1 to 4096)\n"
    "  --hosts H            act as H hosts of N/H ranks each, in rank order: each rank gets its\n"
    "                       host's LOCAL_RANK and LOCAL_WORLD_SIZE, and MIMATRIX_HOST_ID, so no\n"
    "                       memory is shared between hosts (jobs across hosts, on one machine)\n"
    "  --grace SECONDS      after a rank fails, how long the others get before SIGTERM (default 10)\n"
    "  --timeout SECONDS    kill every rank and fail (exit 124) after this long (default, or 0: never)\n"
    "  -x NAME=VALUE        set NAME in every rank's environment; -x NAME passes this shell's NAME\n"
    "  --no-prefix          print the ranks' output as it comes, without \"[rank] \"\n"
    "  -h, --help           this text\n"
    "\n"
    "SIGINT, SIGTERM and SIGHUP are passed on to the ranks (a second one kills them). What a\n"
    "rank leaves running in its process group when it exits (a wrapper's program, background\n"
    "work) is read from until the run ends, then ended; if mimatrix-run dies, even by SIGKILL,\n"
    "a guardian process ends it.\n"
    "\n"
    "Exit status: 0 when every rank exits 0, else the status of the first rank that failed\n"
    "(128 + signal for a rank killed by a signal), 124 on --timeout, 2 for bad usage.\n";

struct usage_error {
  std::string what;
};

int parse_int(std::string_view option, std::string_view text) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size())
    throw usage_error{std::string(option) + " wants an integer, not '" + std::string(text) + "'"};
  return v;
}

std::chrono::milliseconds parse_seconds(std::string_view option, std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v < 0 || v > 1e8)
    throw usage_error{std::string(option) + " wants a number of seconds in [0, 1e8], not '" + s + "'"};
  return std::chrono::milliseconds(static_cast<long long>(std::llround(v * 1000)));
}

mimatrix::bootstrap::launch_options parse(int argc, char** argv, bool& help) {
  mimatrix::bootstrap::launch_options o;
  o.ranks = 0;
  int i = 1;
  // "--grace=5" and "--grace 5" alike.
  auto value = [&](std::string_view arg, std::string_view name, std::string_view& out) {
    if (arg.starts_with(name) && arg.size() > name.size() && arg[name.size()] == '=') {
      out = arg.substr(name.size() + 1);
      return true;
    }
    if (arg != name) return false;
    if (i + 1 >= argc) throw usage_error{std::string(name) + " needs a value"};
    out = argv[++i];
    return true;
  };
  for (; i < argc; ++i) {
    const std::string_view arg = argv[i];
    std::string_view v;
    if (arg == "-h" || arg == "--help") { help = true; return o; }
    if (arg == "--") { ++i; break; }
    if (value(arg, "-n", v) || value(arg, "--ranks", v) || value(arg, "-np", v)) {
      if (o.ranks != 0) throw usage_error{"-n is given twice"};
      o.ranks = parse_int("-n", v);
      if (o.ranks < 1 || o.ranks > mimatrix::bootstrap::max_local_ranks)
        throw usage_error{"-n wants 1 to " + std::to_string(mimatrix::bootstrap::max_local_ranks) + " ranks, not " +
                          std::string(v)};
    } else if (value(arg, "--hosts", v)) {
      o.hosts = parse_int("--hosts", v);
      if (o.hosts < 1) throw usage_error{"--hosts wants at least 1 host, not " + std::string(v)};
    } else if (value(arg, "--grace", v)) {
      o.grace = parse_seconds("--grace", v);
    } else if (value(arg, "--timeout", v)) {
      o.timeout = parse_seconds("--timeout", v);
    } else if (value(arg, "-x", v)) {
      const auto eq = v.find('=');
      const std::string name(v.substr(0, eq));
      if (name.empty()) throw usage_error{"-x wants NAME=VALUE or NAME, not '" + std::string(v) + "'"};
      if (eq != std::string_view::npos) {
        o.env.emplace_back(name, std::string(v.substr(eq + 1)));
      } else {
        const char* here = std::getenv(name.c_str());
        if (!here) throw usage_error{"-x " + name + ": " + name + " is not set in this environment"};
        o.env.emplace_back(name, here);
      }
    } else if (arg == "--no-prefix") {
      o.prefix = false;
    } else if (arg.starts_with("-") && arg.size() > 1) {
      throw usage_error{"unknown option '" + std::string(arg) + "'"};
    } else {
      break;
    }
  }
  for (; i < argc; ++i) o.argv.emplace_back(argv[i]);
  if (o.ranks == 0) throw usage_error{"say how many ranks to run with -n N"};
  if (o.argv.empty()) throw usage_error{"no program to run"};
  if (o.hosts > 0 && o.ranks % o.hosts != 0)
    throw usage_error{std::to_string(o.ranks) + " ranks cannot be spread evenly over " + std::to_string(o.hosts) + " hosts"};
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  // The ranks inherit it: a device call's gate must not share a hardware queue with the
  // call's own work (docs/device.md). An explicit setting (-x, or this shell's) wins.
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  mimatrix::bootstrap::launch_options options;
  bool help = false;
  try {
    options = parse(argc, argv, help);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "mimatrix-run: %s\n(mimatrix-run --help for usage)\n", e.what.c_str());
    return 2;
  }
  if (help) {
    std::fputs(usage, stdout);
    return 0;
  }
  try {
    const auto result = mimatrix::bootstrap::launch_local(options);
    if (result.timed_out)
      std::fprintf(stderr, "mimatrix-run: the ranks were still running after --timeout %.3g s and were killed\n",
                   options.timeout.count() / 1000.0);
    else if (result.failed_rank >= 0)
      std::fprintf(stderr, "mimatrix-run: rank %d failed first (exit status %d)\n", result.failed_rank,
                   result.exit_code);
    // Exit 75 (EX_TEMPFAIL) is a rank the library ended while it was stuck inside the shm
    // provider behind a peer stopped or killed there: the cause is that peer (docs/faults.md).
    for (std::size_t r = 0; r < result.status.size(); ++r)
      if (result.status[r] == 75)
        std::fprintf(stderr,
                     "mimatrix-run: rank %zu exited 75: it was stuck inside the shm provider behind a peer stopped "
                     "or killed there (its last line names the peer); the cause is that peer, not rank %zu\n",
                     r, r);
    return result.exit_code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mimatrix-run: %s\n", e.what());
    return 1;
  }
}
