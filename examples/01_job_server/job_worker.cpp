// job_worker: what a trainer does with the job server, without the model: join, take each
// generation's assignment, meet its ranks through the server's store, and run allreduce
// steps on a gradient-sized buffer (checked exactly) while heartbeats carry the step's
// statistics; on a revoked generation, abort and take the next one.
//
//   MIMATRIX_JOB_SECRET=... job_worker --port 29400 [--address 127.0.0.1] [--steps 50]
//                                      [--elements 1048576] [--reconnect-ms 30000]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "../strict_number.hpp"
#include "worker.hpp"

namespace mx = mimatrix;
using mx::transport::fabric;
using clock_type = std::chrono::steady_clock;

const char* const usage =
    "usage: job_worker --port P [--address 127.0.0.1] [--steps 50] [--elements 1048576] [--reconnect-ms MS]\n"
    "The shared secret comes from MIMATRIX_JOB_SECRET.\n";

using mx::examples::parse_integer;

int main(int argc, char** argv) try {
  mx::job::worker_settings settings;
  std::uint64_t steps = 50;
  std::size_t elements = std::size_t(1) << 20;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") return std::fputs(usage, stdout), 0;
    if (i + 1 >= argc) return std::fprintf(stderr, "job_worker: %s needs a value\n%s", a.c_str(), usage), 2;
    const std::string v = argv[i + 1];
    if (a == "--address") settings.address = v;
    else if (a == "--port") settings.port = std::uint16_t(parse_integer(a, v, 1, 65535));
    else if (a == "--steps") steps = std::uint64_t(parse_integer(a, v, 1, 1ll << 62));
    else if (a == "--elements") elements = std::size_t(parse_integer(a, v, 1, 1ll << 40));
    else if (a == "--reconnect-ms") settings.reconnect_for = std::chrono::milliseconds(parse_integer(a, v, 0, 1ll << 40));
    else return std::fprintf(stderr, "job_worker: unknown option %s\n%s", a.c_str(), usage), 2;
  }
  if (settings.port == 0) return std::fprintf(stderr, "job_worker: --port is required\n%s", usage), 2;
  settings.secret = mx::job::load_secret();
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  settings.info.host = host;
  mx::job::worker_client client(settings);

  std::mutex current_mutex;  // the revoke callback runs on the client's reader thread
  fabric* current = nullptr;
  client.on_revoke([&](const mx::job::revoke& r) {
    std::lock_guard lock(current_mutex);
    if (current) current->abort("the job server revoked generation " + std::to_string(r.generation) + ": " + r.reason);
  });

  while (true) {
    const mx::job::assignment a = client.next_assignment(std::chrono::minutes(10));
    if (a.resume_step >= steps) break;
    mx::transport::fabric_options options;
    options.group = mx::job::group_name(a);
    // A generation revoked while it forms (a rank died in its rendezvous) ends the
    // rendezvous at once; the next assignment follows.
    std::optional<mx::communicator<fabric>> comm;
    try {
      comm.emplace(mx::job::identity_of(a), std::make_shared<mx::job::job_store>(client, a.generation), options);
    } catch (const mx::error& e) {
      std::printf("job_worker: generation %llu did not form: %s\n", static_cast<unsigned long long>(a.generation), e.what());
      std::fflush(stdout);
      continue;
    }
    {
      std::lock_guard lock(current_mutex);
      current = &comm->transport();
    }
    if (client.revoked() >= a.generation) comm->transport().abort("revoked before it started");
    std::printf("job_worker: generation %llu, rank %u of %u, local batch %u, samples [%llu, %llu), from step %llu\n",
                static_cast<unsigned long long>(a.generation), a.rank, a.size, a.local_batch,
                static_cast<unsigned long long>(a.shard_begin), static_cast<unsigned long long>(a.shard_end),
                static_cast<unsigned long long>(a.resume_step));
    mx::allreduce<fabric, mx::topology::ring, mx::reduce::sum<float>> sum(*comm);
    std::vector<float> gradient(elements);
    std::uint64_t step = a.resume_step;
    bool finished = false;
    try {
      while (step < steps) {
        const auto t0 = clock_type::now();
        std::fill(gradient.begin(), gradient.end(), float(comm->rank() + 1));  // stands for a backward pass
        const auto t1 = clock_type::now();
        sum(gradient);
        const auto t2 = clock_type::now();
        const float want = float(a.size) * float(a.size + 1) / 2;
        if (gradient.front() != want || gradient.back() != want)
          throw std::runtime_error("step " + std::to_string(step) + ": the sum is wrong");
        ++step;
        const double allreduce_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
        const double step_ms = std::chrono::duration<double, std::milli>(t2 - t0).count();
        const double bytes = double(elements) * sizeof(float);
        const double busbw = a.size > 1 ? bytes * 2 * (a.size - 1) / a.size / (allreduce_ms * 1e6) : 0;
        // Throughput of its own compute (not of the allreduce every rank waits in): what
        // the server balances local batches by.
        const double compute_ms = std::max(std::chrono::duration<double, std::milli>(t1 - t0).count(), 1e-3);
        client.report({a.generation, step, step_ms, allreduce_ms, busbw, 1.0 / double(step), 1000.0 * a.local_batch / compute_ms});
        if (step % 10 == 0 || step == steps)
          std::printf("job_worker: rank %u step %llu: allreduce %.2f ms, busbw %.2f GB/s, exact\n", a.rank,
                      static_cast<unsigned long long>(step), allreduce_ms, busbw);
      }
      finished = true;
    } catch (const mx::error& e) {
      std::printf("job_worker: generation %llu ended at step %llu: %s\n", static_cast<unsigned long long>(a.generation),
                  static_cast<unsigned long long>(step), e.what());
    }
    {
      std::lock_guard lock(current_mutex);
      current = nullptr;
    }
    if (finished) {
      client.leave(a.generation);
      std::printf("job_worker: done, %llu steps exact in generation %llu of %u ranks\n",
                  static_cast<unsigned long long>(step), static_cast<unsigned long long>(a.generation), a.size);
      return 0;
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "job_worker: %s\n", e.what());
  return 1;
}
