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
#include <string>
#include <vector>

#include "mimatrix/allreduce.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "mimatrix/transport/inproc.hpp"

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

settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "overlap_perf: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--transport") s.transport = next();
    else if (a == "-n") s.ranks = std::stoi(next());
    else if (a == "--iters") s.iters = std::stoi(next());
    else if (a == "--compute-ms") s.compute_ms = std::stod(next());
    else if (a == "--mib") s.mib = {std::size_t(std::stoul(next()))};
    else {
      std::fprintf(stderr, "usage: overlap_perf [--transport inproc|fabric] [-n ranks] [--iters N] "
                           "[--compute-ms MS] [--mib SIZE]\n");
      std::exit(2);
    }
  }
  if (s.transport != "inproc" && s.transport != "fabric") {
    std::fprintf(stderr, "overlap_perf: --transport must be inproc or fabric, got '%s'\n", s.transport.c_str());
    std::exit(2);
  }
  return s;
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
