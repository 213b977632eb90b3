// What a framework author copies: a fabric communicator from the launcher's environment
// (torchrun, mimatrix-run, Open MPI, Slurm; or an identity and the framework's own
// store), gradient buckets allreduced by runtime dtype (float and half), 32 in flight,
// with the progress thread on; then a node-local group by split.
//
//   mimatrix-run -n 4 ./framework_example
#include <mimatrix/mimatrix.hpp>
#include <mimatrix/transport/fabric.hpp>

#include <cstdio>
#include <cstdint>
#include <vector>

using mimatrix::dtype;
using mimatrix::transport::fabric;

int main() try {
  // With a framework's store: mimatrix::communicator<fabric> comm(identity, store).
  mimatrix::communicator<fabric> comm;
  comm.set_progress(mimatrix::progress_mode::thread);  // calls advance while the caller computes
  mimatrix::collectives<fabric> coll(comm);
  const int p = comm.size(), r = comm.rank();

  // 32 buckets, as a backward pass hands them over: float32 and float16 alternately.
  constexpr int buckets = 32;
  std::vector<std::vector<float>> f32(buckets / 2);
  std::vector<std::vector<mimatrix::half>> f16(buckets / 2);
  std::vector<mimatrix::request> pending;
  for (int b = 0; b < buckets; ++b) {
    const std::size_t count = 1000 + 997 * std::size_t(b);
    if (b % 2 == 0) {
      auto& v = f32[std::size_t(b / 2)];
      v.assign(count, float(r + 1));
      pending.push_back(coll.allreduce(v.data(), v.data(), count, dtype::float32, mimatrix::reduce::op_kind::sum));
    } else {
      auto& v = f16[std::size_t(b / 2)];
      v.assign(count, mimatrix::half(float(r + 1)));
      pending.push_back(coll.allreduce(v.data(), v.data(), count, dtype::float16, mimatrix::reduce::op_kind::sum));
    }
  }
  // ... the framework computes here; the progress thread moves the buckets meanwhile ...
  for (auto& request : pending) request.wait();

  const float want = float(p) * float(p + 1) / 2;  // exact in both types for small p
  for (const auto& v : f32)
    for (float x : v)
      if (x != want) return std::fprintf(stderr, "rank %d: float bucket %f, want %f\n", r, x, want), 1;
  for (const auto& v : f16)
    for (auto x : v)
      if (float(x) != want) return std::fprintf(stderr, "rank %d: half bucket %f, want %f\n", r, float(x), want), 1;

  // Node-local group (as MPI_COMM_TYPE_SHARED): a hierarchical scheme reduces here first.
  auto local = comm.split(fabric::same_host, r);
  mimatrix::collectives<fabric> node(*local);
  std::int64_t one = 1;
  node.allreduce(&one, &one, 1, dtype::int64, mimatrix::reduce::op_kind::sum).wait();
  if (one != local->size()) return std::fprintf(stderr, "rank %d: node-local sum %lld\n", r, (long long)one), 1;

  if (r == 0)
    std::printf("framework example: %d buckets (float, half) exact on %d ranks; node-local group of %d\n", buckets, p,
                local->size());
  return 0;
} catch (const mimatrix::error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
