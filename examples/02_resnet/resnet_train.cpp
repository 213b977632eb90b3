// resnet_train: data-parallel ResNet training on Fashion-MNIST (or ImageNet-shaped random
// data for ResNet-50's throughput) over mimatrix: wait-free backpropagation, sufficient
// factors for the classifier where they pay, ranks alone, under a launcher, or from the
// MiMatrix job server with recovery when a worker dies.
//
//   resnet_train --model resnet20 --epochs 30                       # one rank
//   mimatrix-run -n 2 resnet_train --epochs 1 --steps 100           # two ranks (RANK, WORLD_SIZE, ...)
//   MIMATRIX_JOB_SECRET=... resnet_train --job-server 127.0.0.1:29400 [--reconnect-ms 60000]
//   mimatrix-run -n 2 resnet_train --device cuda                  # a GPU a rank
#include "train/options.hpp"
#include "train/run.hpp"

#ifdef MIMATRIX_RESNET_JOB_SERVER
#include "worker.hpp"
#endif
#ifdef MIMATRIX_RESNET_CUDA
#include "train/cuda_session.hpp"
#endif

#include <mimatrix/communicator.hpp>
#include <mimatrix/transport/fabric.hpp>

#include <malloc.h>
#include <omp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>


namespace mx = mimatrix;
namespace rt = mimatrix::resnet::train;
using mx::transport::fabric;

namespace {

// oneDNN's threads for this rank: the cores shared among the ranks on this host.
int threads_for(const rt::options& opt) {
  if (opt.threads > 0) return opt.threads;
  int local = 1;
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"})
    if (const char* v = std::getenv(name)) {
      local = std::max(1, std::atoi(v));
      break;
    }
  return std::max(1, int(std::thread::hardware_concurrency()) / local);
}

// Whether every rank learns of `e` without an abort: a lost peer fails every call on each
// rank that meets it, an abort or a mismatch (the rank that found it tells every rank, and
// calls after it fail with its code) reached them already. Aborting on it would end their
// calls with this rank's message, the cause nested in it (a black-box test).
bool every_rank_learns_of(const std::exception& e) {
  const auto* failure = dynamic_cast<const mx::error*>(&e);
  return failure && (failure->code() == mx::errc::peer_lost || failure->code() == mx::errc::aborted ||
                     failure->code() == mx::errc::mismatch);
}

// A session of the chosen backend (rt::session or rt::cuda_session) on the chosen data.
template <class Session>
std::unique_ptr<Session> make_session(const rt::options& opt) {
  namespace data = mx::resnet::data;
  if (opt.synthetic) {
    const auto side = std::size_t(opt.image_size);
    const auto count = std::size_t(std::max<std::int64_t>(opt.batch * 2, 256));
    return std::make_unique<Session>(opt, rt::synthetic_set(count, side, opt.seed),
                                     rt::synthetic_set(std::size_t(std::max<std::int64_t>(opt.batch, 250)), side,
                                                       opt.seed + 1),
                                     1000);
  }
  const auto dir = opt.data_dir.empty() ? data::fashion_mnist_default_dir() : std::filesystem::path(opt.data_dir);
  if (!data::fashion_mnist_present(dir))
    throw std::runtime_error("Fashion-MNIST not found in " + dir.string() +
                             " (apt-get install dataset-fashion-mnist, or --data DIR, or --synthetic)");
  auto sets = data::load_fashion_mnist(dir);
  return std::make_unique<Session>(opt, std::move(sets.train), std::move(sets.test), 10);
}

// Ranks from the launcher's environment (or one rank alone), local batches split evenly.
/// Resumes from --checkpoint when --resume asks, saying so where `say` (flushed: under a
/// launcher's pipe the line would wait for the first epoch's).
template <class Session>
void resume(Session& s, bool say) {
  if (s.resume_from_checkpoint() && say)
    std::printf("resnet_train: resumed from %s at step %lld\n", s.opt.checkpoint.c_str(), static_cast<long long>(s.step));
  std::fflush(stdout);
}

template <class Session>
int run_standalone(Session& s) {
  mx::communicator<fabric> comm;
  if (s.opt.progress_thread) comm.set_progress(mx::progress_mode::thread);
  const std::int64_t p = comm.size(), r = comm.rank();
  // Every rank knows both, so all refuse together (an empty share would divide by zero).
  if (s.opt.batch < p)
    throw std::invalid_argument("--batch " + std::to_string(s.opt.batch) + " is smaller than the " + std::to_string(p) +
                                " ranks: every rank needs at least one sample");
  const std::int64_t local = s.opt.batch / p + (r < s.opt.batch % p ? 1 : 0);
  try {
    if (r == 0) rt::check_checkpoint_writable(s.opt);
    resume(s, r == 0);
    rt::train_group(s, comm, local);
  } catch (const std::exception& e) {
    // A failure of this rank alone (say rank 0's checkpoint) would leave the others waiting
    // in a collective until its timeout: the abort tells them at once.
    if (!every_rank_learns_of(e)) comm.abort(e.what());
    throw;
  }
  if (r == 0) std::printf("resnet_train: done, %lld steps\n", static_cast<long long>(s.step));
  return 0;
}

#ifdef MIMATRIX_RESNET_JOB_SERVER
// Ranks, local batches and recovery from the job server: each generation is a group; when
// it is revoked (a worker died, joined or was rebalanced), the next one goes on from the
// most advanced rank's state.
template <class Session>
int run_with_job_server(Session& s) {
  namespace job = mx::job;
  job::worker_settings settings;
  const auto colon = s.opt.job_server.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("--job-server takes HOST:PORT");
  settings.address = s.opt.job_server.substr(0, colon);
  settings.port = std::uint16_t(mx::examples::parse_integer("--job-server's port", s.opt.job_server.substr(colon + 1), 1, 65535));
  settings.secret = job::load_secret();
  // A lost connection is joined again for this long, as job_worker --reconnect-ms does: a
  // server restarted on its state file takes the generation back, and training goes on.
  settings.reconnect_for = std::chrono::milliseconds(s.opt.reconnect_ms);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  settings.info.host = host;
  job::worker_client client(settings);

  std::mutex current_mutex;  // the revoke callback runs on the client's reader thread
  fabric* current = nullptr;
  client.on_revoke([&](const job::revoke& r) {
    std::lock_guard lock(current_mutex);
    if (current) current->abort("the job server revoked generation " + std::to_string(r.generation) + ": " + r.reason);
  });
  rt::check_checkpoint_writable(s.opt);  // any worker may be a generation's rank 0, which saves it
  resume(s, true);  // each worker its own: a group starts from its most advanced
  while (true) {
    const job::assignment a = client.next_assignment(std::chrono::minutes(10));
    mx::transport::fabric_options options;
    options.group = job::group_name(a);
    // A generation revoked while it forms (a member died) ends its rendezvous at once
    // (job_store): the survivors go on to the next one.
    std::optional<mx::communicator<fabric>> formed;
    try {
      formed.emplace(job::identity_of(a), std::make_shared<job::job_store>(client, a.generation), options);
    } catch (const mx::error& e) {
      std::printf("resnet_train: generation %llu did not form: %s\n", static_cast<unsigned long long>(a.generation),
                  e.what());
      std::fflush(stdout);
      continue;
    }
    mx::communicator<fabric>& comm = *formed;
    if (s.opt.progress_thread) comm.set_progress(mx::progress_mode::thread);
    {
      std::lock_guard lock(current_mutex);
      current = &comm.transport();
    }
    if (client.revoked() >= a.generation) comm.transport().abort("revoked before it started");
    std::printf("resnet_train: generation %llu, rank %u of %u, local batch %u, from step %lld\n",
                static_cast<unsigned long long>(a.generation), a.rank, a.size, a.local_batch,
                static_cast<long long>(s.step));
    std::fflush(stdout);
    bool finished = false;
    double busbw_gbps = 0;  // the last step's that timed the whole allreduce (every --measure-every-th overlapped)
    try {
      rt::train_group(s, comm, std::int64_t(a.local_batch), [&](const rt::step_report& r) {
        const double step_ms = r.stats.compute_ms + r.stats.wait_ms;
        if (r.busbw_gbps > 0) busbw_gbps = r.busbw_gbps;
        client.report({a.generation, std::uint64_t(r.step), step_ms, r.stats.wait_ms, busbw_gbps,
                       r.stats.loss_sum / double(std::max<std::int64_t>(1, r.stats.samples)),
                       1000.0 * double(r.local_batch) / std::max(r.stats.compute_ms, 1e-3)});
      });
      finished = true;
    } catch (const std::exception& e) {
      // This rank's own failure, not the server's revoke: its peers learn it at once (they
      // would wait in a collective until their timeout) and the server revokes the
      // generation (it would go on as if it ran, a black-box test).
      if (client.revoked() < a.generation) {
        if (!every_rank_learns_of(e)) comm.abort(e.what());
        client.report_failure(a.generation, e.what());
      }
      std::printf("resnet_train: generation %llu ended at step %lld: %s\n", static_cast<unsigned long long>(a.generation),
                  static_cast<long long>(s.step), e.what());
      std::fflush(stdout);
      // A bad argument (flags that differ between ranks, a checkpoint that cannot be
      // written) fails every generation alike: this worker ends rather than loop.
      const auto* failure = dynamic_cast<const mx::error*>(&e);
      if (!failure || failure->code() == mx::errc::invalid_argument) throw;
    }
    {
      std::lock_guard lock(current_mutex);
      current = nullptr;
    }
    if (finished) {
      client.leave(a.generation);
      std::printf("resnet_train: done, %lld steps, last in generation %llu of %u ranks\n",
                  static_cast<long long>(s.step), static_cast<unsigned long long>(a.generation), a.size);
      return 0;
    }
  }
}
#endif

// Under the job server or alone, on either backend's session.
template <class Session>
int run(Session& s) {
  if (!s.opt.job_server.empty()) {
#ifdef MIMATRIX_RESNET_JOB_SERVER
    return run_with_job_server(s);
#else
    throw std::invalid_argument("--job-server: this build has no job server client (needs Boost and OpenSSL)");
#endif
  }
  return run_standalone(s);
}

}  // namespace

// Ctrl-C or a launcher's TERM: say so and exit as a shell would (130, 143), not a bare 1.
extern "C" void on_interrupt(int sig) {
  static const char line[] = "resnet_train: interrupted\n";
  [[maybe_unused]] const auto n = ::write(STDERR_FILENO, line, sizeof line - 1);
  ::_exit(128 + sig);
}

int main(int argc, char** argv) try {
  const rt::options opt = rt::parse_options(argc, argv);
  struct sigaction interrupt = {};
  interrupt.sa_handler = on_interrupt;
  ::sigemptyset(&interrupt.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) ::sigaction(sig, &interrupt, nullptr);
  omp_set_num_threads(threads_for(opt));
  // A layer's tensors are megabytes, freed and allocated again every step: keep them in
  // the heap instead of mmap's fresh (faulted, zeroed) pages each time.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  if (opt.device == "cuda") {
    // Before CUDA starts: a collective's gate must not share a hardware queue with the
    // collective's own work (docs/device.md); an explicit setting wins.
    ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
#ifdef MIMATRIX_RESNET_CUDA
    return run(*make_session<rt::cuda_session>(opt));
#else
    throw std::invalid_argument("--device cuda: this build has no GPU backend (needs CUDA, cuBLAS and cuDNN)");
#endif
  }
  return run(*make_session<rt::session>(opt));
} catch (const std::exception& e) {
  std::fprintf(stderr, "resnet_train: %s\n", e.what());
  return 1;
}
