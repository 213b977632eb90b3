// How much of a non-blocking allreduce is done while the caller computes, by transport
// and progress mode: per size, the blocking time of the call alone, then the time left in
// wait() after `--compute-ms` of a busy loop started right after start(). overlap% =
// 1 - wait / blocking: 100% hid the whole call, 0% hid nothing. compute% is the work the
// loop got done beside the call, against the loop alone: what the progress costs it.
//
//   overlap_perf --transport inproc -n 2                     (threads of this process)
//   mimatrix-run -n 2 overlap_perf --transport fabric        (processes; MIMATRIX_PROVIDER)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "mimatrix/allreduce.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "mimatrix/transport/inproc.hpp"

#include "../../examples/strict_number.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct settings {
  std::string transport = "inproc";
  int ranks = 2;  // inproc only
  int iters = 5;
  double compute_ms = 300;
  std::vector<std::size_t> mib{1, 16, 64};
};

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

/// A compute loop the optimizer cannot drop (the caller's forward or backward pass);
/// returns the passes it made.
double busy(double ms, std::vector<float>& work, double& sink) {
  const auto t0 = clock_type::now();
  double passes = 0;
  while (ms_since(t0) < ms) {
    for (std::size_t i = 0; i < work.size(); ++i) sink += work[i] = std::sqrt(work[i] * 1.0001f + 1.0f);
    ++passes;
  }
  return passes;
}

template <class Transport>
void measure(mimatrix::communicator<Transport>& comm, const settings& s, const char* label) {
  mimatrix::allreduce<Transport, mimatrix::topology::ring, mimatrix::reduce::sum<float>> sum(comm);
  std::vector<float> work(4096, 1.0f);
  double sink = 0;
  if (comm.rank() == 0)
    std::printf("# %-22s %8s %10s %12s %12s %9s %9s\n", "transport", "progress", "size(B)", "blocking(ms)",
                "wait(ms)", "overlap%", "compute%");
  for (auto mode : {mimatrix::progress_mode::caller, mimatrix::progress_mode::thread}) {
    comm.set_progress(mode);
    const double alone = busy(s.compute_ms, work, sink);
    for (std::size_t mib : s.mib) {
      std::vector<float> data(mib * (std::size_t(1) << 20) / sizeof(float), 1.0f);
      sum(data);  // warm-up: schedules, registrations, pages
      double blocking = 0, waiting = 0, passes = 0;
      for (int it = 0; it < s.iters; ++it) {
        auto t0 = clock_type::now();
        sum(data);
        blocking += ms_since(t0);
        auto pending = sum.start(data);
        passes += busy(s.compute_ms, work, sink);
        t0 = clock_type::now();
        pending.wait();
        waiting += ms_since(t0);
      }
      blocking /= s.iters;
      waiting /= s.iters;
      if (comm.rank() == 0)
        std::printf("  %-22s %8s %10zu %12.2f %12.2f %8.0f%% %8.0f%%\n", label,
                    mode == mimatrix::progress_mode::thread ? "thread" : "caller", data.size() * sizeof(float),
                    blocking, waiting, 100.0 * std::clamp(1.0 - waiting / blocking, 0.0, 1.0),
                    100.0 * passes / s.iters / alone);
    }
  }
  if (sink == 42) std::puts("");
}

void usage(std::FILE* f) {
  std::fprintf(f, "usage: overlap_perf [--transport inproc|fabric] [-n ranks (inproc)] [--iters N] "
                  "[--compute-ms MS] [--mib SIZE]\n"
                  "  fabric's ranks are processes: mimatrix-run -n 2 overlap_perf --transport fabric\n");
}

settings parse(int argc, char** argv) try {
  namespace ex = mimatrix::examples;
  settings s;
  bool ranks_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") usage(stdout), std::exit(0);
    else if (a == "--transport") s.transport = next();
    else if (a == "-n") s.ranks = int(ex::parse_integer(a, next(), 1, 1024)), ranks_given = true;
    else if (a == "--iters") s.iters = int(ex::parse_integer(a, next(), 1, 1 << 20));
    else if (a == "--compute-ms") s.compute_ms = ex::parse_number(a, next(), 0, 1e6, true);
    else if (a == "--mib") s.mib = {std::size_t(ex::parse_integer(a, next(), 1, 1 << 16))};
    else throw std::invalid_argument("unknown option " + a);
  }
  if (s.transport != "inproc" && s.transport != "fabric")
    throw std::invalid_argument("--transport must be inproc or fabric, not '" + s.transport + "'");
  // fabric's ranks come from the launcher; -n would be silently ignored.
  if (s.transport == "fabric" && ranks_given)
    throw std::invalid_argument("-n is for inproc; run fabric's ranks as processes: mimatrix-run -n " +
                                std::to_string(s.ranks) + " overlap_perf --transport fabric");
  return s;
} catch (const std::invalid_argument& e) {
  std::fprintf(stderr, "overlap_perf: %s\n", e.what());
  usage(stderr);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  const settings s = parse(argc, argv);
  if (s.transport == "inproc") {
    mimatrix::transport::run_inproc(s.ranks, [&](int r, mimatrix::transport::inproc::world& w) {
      mimatrix::communicator<mimatrix::transport::inproc> comm(w, r);
      measure(comm, s, ("inproc x" + std::to_string(s.ranks)).c_str());
    });
    return 0;
  }
  mimatrix::communicator<mimatrix::transport::fabric> comm;
  const std::string label = "fabric " + comm.transport().provider() + " x" + std::to_string(comm.size());
  measure(comm, s, label.c_str());
  return 0;
}
