// Device buffers between processes with no copy through host memory, on both paths:
// read directly by peers on one host (fabric/execution_shared.hpp, as CUDA IPC: each
// receiver opens its sender's block and copies or reduces from it on its own stream), and
// moved by the provider itself (fabric/execution_device_memory.hpp, FI_HMEM: registered
// with their interface, received into device staging slots). Through the host port,
// whose "device" blocks processes share (memfd), which the network reads as host memory
// (FI_HMEM_SYSTEM), and whose kernels refuse host memory: exact results for every
// two-sided algorithm and collective on late-running streams, ordered on the caller's
// stream; GDRAA's collectives as one pass a rank over every rank's memory, with the least
// traffic, also as algorithm::automatic's choice; a buffer
// that cannot be shared fails every rank, naming it.
#include "mimatrix/transport/fabric.hpp"

#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/device/host_port.hpp"
#include "mimatrix/topology/mesh.hpp"
#include "multi_process.hpp"
#include "support/device_array.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using test::device_array;
using transport::fabric;

call_options on(const device::stream& s, std::string algorithm = {}) {
  return {.algorithm = std::move(algorithm), .timeout = {}, .stream = s, .tag = 0};
}

MIMATRIX_SCENARIO(shared_collectives) {
  device::host_port dev({.lag = 20us, .device_memory_only = true});  // before the communicator
  communicator<fabric> comm;
  comm.set_timeout(30s);
  collectives<fabric> coll(comm);
  const int p = comm.size(), r = comm.rank();
  const device::stream s{&dev, dev.make_stream()};
  const bool provider_moves = std::getenv("MIMATRIX_DEVICE_HMEM") != nullptr;  // else peers read directly
  int wrong = 0;

  // A producer queued before each call writes the input late, and clears the output (a
  // receive landing there before it ran would be lost); only the stream is synchronized
  // before the result is read, by a consumer queued after the call.
  constexpr std::size_t n = 30'011;
  const auto late_allreduce = [&](auto& c, const char* algo, bool in_place) {
    device_array<std::int64_t> in(dev, n), out(dev, n);
    std::vector<std::int64_t> seen;
    dev.enqueue(s.handle, [&] {
      std::this_thread::sleep_for(10ms);
      for (std::size_t i = 0; i < n; ++i) in[i] = std::int64_t(i % 1000) * (r + 1);
      if (!in_place)
        for (std::size_t i = 0; i < n; ++i) out[i] = -1;
    });
    std::int64_t* dst = in_place ? in.data() : out.data();
    auto pending = c.allreduce(in.data(), dst, n, dtype::int64, reduce::op_kind::sum, on(s, algo));
    dev.enqueue(s.handle, [&] { seen.assign(dst, dst + n); });
    dev.synchronize(s.handle);
    pending.wait();
    int bad = seen.size() != n;
    for (std::size_t i = 0; i < n && !bad; ++i) bad += seen[i] != std::int64_t(i % 1000) * (p * (p + 1) / 2);
    if (bad) std::printf("rank %d: %s%s wrong\n", r, *algo ? algo : "automatic", in_place ? " in place" : "");
    return bad;
  };
  for (const char* algo : {"ring", "recursive_doubling", "halving_doubling"})
    for (bool in_place : {true, false}) wrong += late_allreduce(coll, algo, in_place);

  // Calls in flight one after another on the stream, none waited for in between (a
  // trainer's gradient buckets): each has a stream of its own for its landings. With no
  // algorithm named they run as GDRAA's one pass (below).
  {
    constexpr int calls = 4;
    const char* algorithms[calls] = {"ring", "", "recursive_doubling", ""};
    std::vector<std::unique_ptr<device_array<std::int32_t>>> buckets;
    std::vector<request> in_flight;
    for (int c = 0; c < calls; ++c) {
      buckets.push_back(std::make_unique<device_array<std::int32_t>>(dev, 5000, std::int32_t(r + c)));
      in_flight.push_back(coll.allreduce(buckets.back()->data(), buckets.back()->data(), 5000, dtype::int32,
                                         reduce::op_kind::sum, on(s, algorithms[c])));
    }
    dev.synchronize(s.handle);
    for (auto& q : in_flight) q.wait();
    for (int c = 0; c < calls; ++c)
      for (std::size_t i = 0; i < 5000; ++i) wrong += (*buckets[std::size_t(c)])[i] != p * (p - 1) / 2 + p * c;
  }

  device_array<float> avg(dev, 999, float(r + 1));
  coll.allreduce(avg.data(), avg.data(), avg.size(), dtype::float32, reduce::op_kind::avg, on(s)).wait();
  for (std::size_t i = 0; i < avg.size(); ++i) wrong += avg[i] != float(p + 1) / 2;
  if (provider_moves) {  // registered once: the same buffers again register nothing
    const std::size_t registered = comm.transport().registrations();
    coll.allreduce(avg.data(), avg.data(), avg.size(), dtype::float32, reduce::op_kind::avg, on(s)).wait();
    if (registered == 0 || comm.transport().registrations() != registered)
      std::printf("rank %d: %zu registrations, then %zu for the same buffers\n", r, registered,
                  comm.transport().registrations());
    wrong += registered == 0 || comm.transport().registrations() != registered;
    for (std::size_t i = 0; i < avg.size(); ++i) wrong += avg[i] != float(p + 1) / 2;
  }

  constexpr std::size_t m = 1000;
  device_array<std::int32_t> whole(dev, m * std::size_t(p)), part(dev, m);
  for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = std::int32_t(i) + r;
  coll.reduce_scatter(whole.data(), part.data(), m, dtype::int32, reduce::op_kind::sum, on(s)).wait();
  for (std::size_t i = 0; i < m; ++i) wrong += part[i] != p * std::int32_t(std::size_t(r) * m + i) + p * (p - 1) / 2;

  device_array<float> mine(dev, m, float(r + 1)), all(dev, m * std::size_t(p));
  coll.allgather(mine.data(), all.data(), m, dtype::float32, on(s)).wait();
  for (std::size_t i = 0; i < all.size(); ++i) wrong += all[i] != float(i / m + 1);

  // Small and pipelined in chunks (a send's end may release the next send). What a rank
  // receives does not wait for its own input here: work queued before the call that
  // clears the output late, on every rank but the root, must still come first.
  for (std::size_t count : {std::size_t(777), std::size_t(3) << 20}) {
    device_array<std::int32_t> root(dev, count, 5), got(dev, count, 0);
    if (r != p - 1) dev.enqueue(s.handle, [&] {
      std::this_thread::sleep_for(30ms);
      for (std::size_t i = 0; i < got.size(); ++i) got[i] = -1;
    });
    coll.broadcast(r == p - 1 ? root.data() : nullptr, got.data(), got.size(), dtype::int32, p - 1, on(s)).wait();
    dev.synchronize(s.handle);
    for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != 5;
  }

  // The path taken: peers' blocks opened, or (the provider moving device memory) none
  // opened and nothing copied through host memory.
  const std::size_t opened = dev.imported_blocks(), host_copies = dev.host_copies();
  if (provider_moves && (opened || host_copies))
    std::printf("rank %d: %zu peers' blocks opened, %zu copies through host memory: the provider did not move "
                "device memory itself\n", r, opened, host_copies);
  else if (!provider_moves && opened == 0)
    std::printf("rank %d: no peer's block was opened: the calls did not read peers' memory\n", r);
  wrong += provider_moves ? opened != 0 || host_copies != 0 : opened == 0;

  // GDRAA's allreduce, where peers reach each other's memory, is one pass a rank over its
  // shard of every rank's buffers (execution_direct.hpp): each rank's device work reads
  // that shard of the p inputs and writes it into the p outputs, nothing more, and nothing
  // goes through host memory. Without mailboxes (the provider moving device memory) its
  // one-sided writes stage through host memory, as the other GDRAA collectives always do.
  collectives<fabric, topology::mesh> mesh(comm);
  const auto shard_bytes = [&](std::size_t count, std::size_t size) {
    return (count / std::size_t(p) + (std::size_t(r) < count % std::size_t(p))) * size;
  };
  // An allreduce's pass reads its shard of p inputs and writes it into p outputs.
  const auto least = [&](std::size_t shard) { return 2 * std::size_t(p) * shard; };
  const auto direct_path = [&](std::size_t traffic, std::size_t copies, std::size_t expected, const char* what) {
    const std::size_t made = dev.memory_traffic() - traffic;
    const bool direct = !provider_moves;
    if (direct ? made == expected && dev.host_copies() == copies : dev.host_copies() > copies) return 0;
    std::printf("rank %d: gdraa %s made %zu bytes of device memory traffic (%zu expected) and %zu copies through host "
                "memory\n", r, what, made, direct ? expected : 0, dev.host_copies() - copies);
    return 1;
  };
  for (bool in_place : {true, false}) {
    const std::size_t traffic = dev.memory_traffic(), copies = dev.host_copies();
    wrong += late_allreduce(mesh, "gdraa", in_place);
    wrong += direct_path(traffic, copies, least(shard_bytes(n, sizeof(std::int64_t))), in_place ? "in place" : "");
  }
  {  // avg: the division folds into the pass; fewer elements than ranks leave shards empty
    for (std::size_t count : {std::size_t(1001), std::size_t(p - 1)}) {
      device_array<float> mean(dev, count, float(r + 1));
      const std::size_t traffic = dev.memory_traffic(), copies = dev.host_copies();
      mesh.allreduce(mean.data(), mean.data(), count, dtype::float32, reduce::op_kind::avg, on(s, "gdraa")).wait();
      for (std::size_t i = 0; i < count; ++i) wrong += mean[i] != float(p + 1) / 2;
      wrong += direct_path(traffic, copies, least(shard_bytes(count, sizeof(float))), "avg");
    }
  }
  // With no algorithm named, automatic takes that one pass on the ring topology too; where
  // the provider moves device memory (no mailboxes) it chooses as on host memory.
  for (bool in_place : {true, false}) {
    const std::size_t traffic = dev.memory_traffic(), copies = dev.host_copies();
    wrong += late_allreduce(coll, "", in_place);
    if (!provider_moves) wrong += direct_path(traffic, copies, least(shard_bytes(n, sizeof(std::int64_t))), "by automatic");
  }
  // Its reduce-scatter and allgather too, built with both synchronizations there
  // (gdraa::build_on_shared_device): rank j's pass reads block j of every input into its
  // output, or its input into block j of every output, p+1 blocks a rank (an allgather in
  // place p); named on the mesh, or automatic's choice on the ring (3 ranks here). Where the provider moves device
  // memory, GDRAA's one-sided writes stage through host memory while there is an RMA
  // window, and are lowered to messages that the provider moves without one.
  constexpr std::size_t b = 700;
  const std::size_t block_bytes = b * sizeof(std::int32_t), one_pass = std::size_t(p + 1) * block_bytes;
  const auto scatter_and_gather = [&](auto& with, const char* algorithm, bool in_place, const char* what) {
    device_array<std::int32_t> whole(dev, b * std::size_t(p), -1), block(dev, b, -1);
    std::int32_t* own = in_place ? whole.data() + std::size_t(r) * b : block.data();
    for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = std::int32_t(i) + r;
    std::size_t traffic = dev.memory_traffic(), copies = dev.host_copies();
    with.reduce_scatter(whole.data(), own, b, dtype::int32, reduce::op_kind::sum, on(s, algorithm)).wait();
    for (std::size_t i = 0; i < b; ++i) wrong += own[i] != p * std::int32_t(std::size_t(r) * b + i) + p * (p - 1) / 2;
    if (!provider_moves) wrong += direct_path(traffic, copies, one_pass, what);
    const bool window = comm.transport().window_bytes() > 0;
    if (provider_moves && *algorithm) wrong += window == (dev.host_copies() == copies);
    for (std::size_t i = 0; i < b; ++i) own[i] = std::int32_t(r) * 1000 + std::int32_t(i);
    traffic = dev.memory_traffic();
    copies = dev.host_copies();
    with.allgather(own, whole.data(), b, dtype::int32, on(s, algorithm)).wait();
    for (std::size_t i = 0; i < whole.size(); ++i) wrong += whole[i] != std::int32_t(i / b) * 1000 + std::int32_t(i % b);
    // In place, the own block is in place already: p blocks.
    if (!provider_moves) wrong += direct_path(traffic, copies, one_pass - (in_place ? block_bytes : 0), what);
    if (provider_moves && *algorithm) wrong += window == (dev.host_copies() == copies);
  };
  // A broadcast from rank 1: its pass reads the input once and writes every output, p+1
  // buffers in all (p in place), all of it on the root.
  const auto broadcast = [&](auto& with, const char* algorithm, bool in_place, const char* what) {
    device_array<std::int32_t> data(dev, b, r == 1 ? 5 : -1), got(dev, b, -1);
    std::int32_t* out = in_place ? data.data() : got.data();
    const std::size_t traffic = dev.memory_traffic(), copies = dev.host_copies();
    with.broadcast(r == 1 ? data.data() : nullptr, out, b, dtype::int32, 1, on(s, algorithm)).wait();
    for (std::size_t i = 0; i < b; ++i) wrong += out[i] != 5;
    const std::size_t root = r == 1 ? std::size_t(p + !in_place) * block_bytes : 0;
    if (!provider_moves) wrong += direct_path(traffic, copies, root, what);
  };
  broadcast(mesh, "gdraa", false, "broadcast");
  broadcast(mesh, "gdraa", true, "broadcast in place");
  broadcast(coll, "", false, "broadcast by automatic");
  scatter_and_gather(mesh, "gdraa", false, "reduce-scatter/allgather");
  scatter_and_gather(mesh, "gdraa", true, "reduce-scatter/allgather in place");
  scatter_and_gather(coll, "", true, "reduce-scatter/allgather by automatic");

  dev.free_stream(s.handle);
  if (wrong == 0) std::printf("rank %d: shared device calls exact\n", r);
  return wrong == 0 ? 0 : 1;
}

// Device calls on a part split off the world, as a framework's group within a node: keys
// reversed, so part ranks differ from world ranks ({0} and {3, 2, 1}). The part's ranks
// read each other's memory as a world's do: its collectives take GDRAA's one pass by
// automatic (3 ranks) with exactly its traffic, and the world's calls go on after.
MIMATRIX_SCENARIO(split_device_calls) {
  device::host_port dev({.lag = 20us, .device_memory_only = true});  // before the communicators
  communicator<fabric> world;
  world.set_timeout(30s);
  const int r = world.rank();
  auto part = world.split(r == 0 ? 0 : 1, -r);
  if (!part) return std::printf("rank %d: no part\n", r), 1;
  collectives<fabric> coll(*part);
  const int p = part->size(), pr = part->rank();
  std::int64_t members_sum = 0;  // of world ranks
  for (int q = r == 0 ? 0 : 1; q <= (r == 0 ? 0 : world.size() - 1); ++q) members_sum += q;
  const device::stream s{&dev, dev.make_stream()};
  int wrong = 0;
  const auto traffic = [&](std::size_t before, std::size_t expected, const char* what) {
    const std::size_t made = dev.memory_traffic() - before;
    if (p == 1 || made == expected) return 0;
    std::printf("rank %d (part rank %d of %d): %s made %zu bytes of device memory traffic, %zu expected\n", r, pr, p,
                what, made, expected);
    return 1;
  };

  constexpr std::size_t n = 10'007;
  device_array<std::int64_t> data(dev, n);
  for (std::size_t i = 0; i < n; ++i) data[i] = std::int64_t(i % 1000) * (r + 1);
  std::size_t before = dev.memory_traffic();
  coll.allreduce(data.data(), data.data(), n, dtype::int64, reduce::op_kind::sum, on(s)).wait();
  for (std::size_t i = 0; i < n; ++i) wrong += data[i] != std::int64_t(i % 1000) * (members_sum + p);
  const std::size_t shard = (n / std::size_t(p) + (std::size_t(pr) < n % std::size_t(p))) * sizeof(std::int64_t);
  wrong += traffic(before, 2 * std::size_t(p) * shard, "allreduce");

  constexpr std::size_t b = 700;
  const std::size_t one_pass = std::size_t(p + 1) * b * sizeof(std::int32_t);
  device_array<std::int32_t> whole(dev, b * std::size_t(p)), block(dev, b, -1);
  for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = std::int32_t(i) + r;
  before = dev.memory_traffic();
  coll.reduce_scatter(whole.data(), block.data(), b, dtype::int32, reduce::op_kind::sum, on(s)).wait();
  for (std::size_t i = 0; i < b; ++i)
    wrong += block[i] != p * std::int32_t(std::size_t(pr) * b + i) + std::int32_t(members_sum);
  wrong += traffic(before, one_pass, "reduce-scatter");
  for (std::size_t i = 0; i < b; ++i) block[i] = pr * 1000 + std::int32_t(i);
  before = dev.memory_traffic();
  coll.allgather(block.data(), whole.data(), b, dtype::int32, on(s)).wait();
  for (std::size_t i = 0; i < whole.size(); ++i) wrong += whole[i] != std::int32_t(i / b) * 1000 + std::int32_t(i % b);
  wrong += traffic(before, one_pass, "allgather");
  device_array<std::int32_t> got(dev, b, -1);  // from part rank 0: world rank 3, or 0 alone
  before = dev.memory_traffic();
  coll.broadcast(pr == 0 ? whole.data() : nullptr, got.data(), b, dtype::int32, 0, on(s)).wait();
  for (std::size_t i = 0; i < b; ++i) wrong += got[i] != std::int32_t(i);
  wrong += traffic(before, pr == 0 ? one_pass : 0, "broadcast");
  if (p > 1 && dev.imported_blocks() == 0) wrong += std::printf("rank %d: no member's block was opened\n", r) > 0;

  collectives<fabric> all(world);  // the world's calls go on, on the same stream
  device_array<std::int32_t> ones(dev, 999, r + 1);
  all.allreduce(ones.data(), ones.data(), ones.size(), dtype::int32, reduce::op_kind::sum, on(s)).wait();
  const int q = world.size();
  for (std::size_t i = 0; i < ones.size(); ++i) wrong += ones[i] != q * (q + 1) / 2;

  dev.free_stream(s.handle);
  if (wrong == 0) std::printf("rank %d: split device calls exact\n", r);
  return wrong == 0 ? 0 : 1;
}

// GDRAA's reduce-scatter, allgather and broadcast passes in flight over the mailboxes, as
// automatic's choice: four rounds queued on one stream with no wait between them, each
// allgather gathering what the reduce-scatter before it wrote, each broadcast from another
// root. Every call's synchronizations must meet their own call's, never a neighbour's.
MIMATRIX_SCENARIO(direct_calls_in_flight) {
  device::host_port dev({.lag = 20us, .device_memory_only = true});
  communicator<fabric> comm;
  comm.set_timeout(30s);
  collectives<fabric> coll(comm);
  const int p = comm.size(), r = comm.rank();
  const device::stream s{&dev, dev.make_stream()};
  constexpr std::size_t n = 3000;
  constexpr int rounds = 4;
  std::vector<std::unique_ptr<device_array<std::int64_t>>> whole, block, sent;
  std::vector<request> pending;
  for (int c = 0; c < rounds; ++c) {
    whole.push_back(std::make_unique<device_array<std::int64_t>>(dev, n * std::size_t(p)));
    block.push_back(std::make_unique<device_array<std::int64_t>>(dev, n));
    sent.push_back(std::make_unique<device_array<std::int64_t>>(dev, n, std::int64_t(r) * 7 + c));
    auto& all = *whole.back();
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = std::int64_t(i) * (r + 1) + c;
    pending.push_back(coll.reduce_scatter(all.data(), block.back()->data(), n, dtype::int64, reduce::op_kind::sum, on(s)));
    pending.push_back(coll.allgather(block.back()->data(), all.data(), n, dtype::int64, on(s)));
    pending.push_back(coll.broadcast(sent.back()->data(), sent.back()->data(), n, dtype::int64, c % p, on(s)));
  }
  dev.synchronize(s.handle);
  for (auto& q : pending) q.wait();
  int wrong = 0;
  for (int c = 0; c < rounds; ++c) {
    for (std::size_t i = 0; i < n * std::size_t(p); ++i)
      wrong += (*whole[std::size_t(c)])[i] != std::int64_t(i) * (p * (p + 1) / 2) + p * c;
    for (std::size_t i = 0; i < n; ++i) wrong += (*sent[std::size_t(c)])[i] != std::int64_t(c % p) * 7 + c;
  }
  const std::size_t opened = dev.imported_blocks();
  dev.free_stream(s.handle);
  std::printf("rank %d: %d wrong, %zu peers' blocks opened\n", r, wrong, opened);
  if (wrong == 0 && opened > 0) std::printf("rank %d: calls in flight exact\n", r);
  return wrong == 0 && opened > 0 ? 0 : 1;
}

// Calls on two streams of each rank in flight at once (compute and communication
// streams): on even ranks the first runs late, on odd ranks the second, and a host call
// waited for on the host comes between them; as a ring reading peers' memory and as
// GDRAA's pass. All exact; none hangs behind another's stream.
MIMATRIX_SCENARIO(two_streams_in_flight) {
  device::host_port dev({.lag = 20us, .device_memory_only = true});
  communicator<fabric> comm;
  comm.set_timeout(30s);
  collectives<fabric> coll(comm);
  const int p = comm.size(), r = comm.rank();
  const device::stream streams[2] = {{&dev, dev.make_stream()}, {&dev, dev.make_stream()}};
  constexpr std::size_t n = 2000;
  int wrong = 0;
  for (const char* algorithm : {"ring", ""}) {
    device_array<std::int64_t> first(dev, n), second(dev, n);
    for (std::size_t i = 0; i < n; ++i) first[i] = second[i] = std::int64_t(i) * (r + 1);
    dev.enqueue(streams[r % 2].handle, [] { std::this_thread::sleep_for(40ms); });
    auto a = coll.allreduce(first.data(), first.data(), n, dtype::int64, reduce::op_kind::sum, on(streams[0], algorithm));
    std::vector<std::int64_t> host(n, r);
    coll.allreduce(host.data(), host.data(), n, dtype::int64, reduce::op_kind::sum).wait();
    auto b = coll.allreduce(second.data(), second.data(), n, dtype::int64, reduce::op_kind::max, on(streams[1], algorithm));
    for (const device::stream& s : streams) dev.synchronize(s.handle);
    a.wait();
    b.wait();
    for (std::size_t i = 0; i < n; ++i)
      wrong += first[i] != std::int64_t(i) * (p * (p + 1) / 2) || second[i] != std::int64_t(i) * p ||
               host[i] != p * (p - 1) / 2;
  }
  for (const device::stream& s : streams) dev.free_stream(s.handle);
  std::printf("rank %d: two streams in flight %s\n", r, wrong ? "wrong" : "exact");
  return wrong ? 1 : 0;
}

// A call that fails (its deadline passes) while an earlier call on the same stream still
// waits for a late peer: its work waits behind the earlier call's gate, and letting go of
// it must not block the thread that moves the earlier call. Both end: the first exact.
MIMATRIX_SCENARIO(failure_behind_a_pending_call) {
  device::host_port dev({.lag = 20us, .device_memory_only = true});
  communicator<fabric> comm;
  collectives<fabric> coll(comm);
  const int p = comm.size(), r = comm.rank();
  const device::stream s{&dev, dev.make_stream()};
  const char* algorithm = std::getenv("MIMATRIX_TEST_ALGORITHM");
  constexpr std::size_t n = 1000;
  device_array<std::int64_t> first(dev, n, r + 1), second(dev, n, 1);
  if (r == p - 1) std::this_thread::sleep_for(1500ms);  // its first call comes late, its second never
  call_options long_wait = on(s, algorithm), short_wait = on(s, algorithm);
  long_wait.timeout = 20'000ms;
  short_wait.timeout = 200ms;
  auto a = coll.allreduce(first.data(), first.data(), n, dtype::int64, reduce::op_kind::sum, long_wait);
  std::string second_error = "not started";
  if (r != p - 1) {
    auto b = coll.allreduce(second.data(), second.data(), n, dtype::int64, reduce::op_kind::sum, short_wait);
    std::this_thread::sleep_for(1000ms);  // the progress thread, not this one, sees the deadline pass
    try {
      b.wait();
      second_error = "none";
    } catch (const error& e) {
      second_error = e.what();
    }
  }
  std::string first_error = "exact";
  try {
    a.wait();
    dev.synchronize(s.handle);
    for (std::size_t i = 0; i < n; ++i)
      if (first[i] != p * (p + 1) / 2) first_error = "wrong";
  } catch (const error& e) {
    first_error = e.what();
  }
  dev.free_stream(s.handle);
  std::printf("rank %d: first call %s; second call: %s\n", r, first_error.c_str(), second_error.c_str());
  // The second call ends within its deadline: timed out, its late peer named as lost, or
  // named as closed (it told its peers when it left, having never joined the call).
  const bool ended = second_error.find("timed out") != std::string::npos ||
                     second_error.find("did not answer a liveness probe") != std::string::npos ||
                     second_error.find("rank 2 closed its communicator") != std::string::npos;
  return first_error == "exact" && (r == p - 1 || ended) ? 0 : 1;
}

// ncclCommAbort with work on the stream: a watchdog thread aborts while two ranks' device
// calls (two on each stream) wait for a third that never joins. Their calls fail with `aborted`, naming who
// aborted and why; the streams those calls held go on; the third rank hears of it from
// async_error(). MIMATRIX_TEST_ALGORITHM names the algorithm ("": automatic's).
MIMATRIX_SCENARIO(device_call_aborted) {
  device::host_port dev({.lag = 0us, .device_memory_only = true});
  communicator<fabric> comm;
  comm.set_timeout(30s);
  collectives<fabric> coll(comm);
  const int r = comm.rank(), p = comm.size();
  const device::stream s{&dev, dev.make_stream()};
  const char* algorithm = std::getenv("MIMATRIX_TEST_ALGORITHM");
  device_array<std::int32_t> data(dev, 4096, 1);
  coll.allreduce(data.data(), data.data(), data.size(), dtype::int32, reduce::op_kind::sum, on(s, algorithm)).wait();
  std::string what = "succeeded";
  bool went_on = false;
  if (r == p - 1) {  // never joins the second call
    const auto until = std::chrono::steady_clock::now() + 10s;
    std::optional<error> e;
    while (!(e = comm.async_error()) && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    if (e) what = "CAUGHT " + e->code().message() + ": " + e->what();
    went_on = true;
  } else {
    std::thread watchdog;
    if (r == 1) watchdog = std::thread([&] {
      std::this_thread::sleep_for(200ms);
      comm.abort("watchdog saw no progress");
    });
    // Two calls queued on the stream: the second's work waits behind the first's gate,
    // whichever of them the abort ends first.
    device_array<std::int32_t> more(dev, 1000, 1);
    auto first =
        coll.allreduce(data.data(), data.data(), data.size(), dtype::int32, reduce::op_kind::sum, on(s, algorithm));
    auto second =
        coll.allreduce(more.data(), more.data(), more.size(), dtype::int32, reduce::op_kind::sum, on(s, algorithm));
    dev.enqueue(s.handle, [&] { went_on = true; });
    dev.synchronize(s.handle);  // returns only if the aborted calls let the stream go
    for (request* q : {&first, &second}) {
      try {
        q->wait();
      } catch (const error& e) {
        what = "CAUGHT " + e.code().message() + ": " + e.what();
        continue;
      }
      what = "a call succeeded";
      break;
    }
    if (watchdog.joinable()) watchdog.join();
  }
  dev.free_stream(s.handle);
  std::printf("rank %d: %s (the stream went on: %s)\n", r, what.c_str(), went_on ? "yes" : "no");
  return what.starts_with("CAUGHT") && went_on ? 0 : 1;
}

/// One ring allreduce on the port's device memory (rank 1's input on the host when
/// `host_input_on_rank_1`); prints what it ended with. 0 if it failed.
int ring_allreduce_that_fails(device::host_port::settings port_settings, bool host_input_on_rank_1) {
  device::host_port dev(port_settings);
  communicator<fabric> comm;
  comm.set_timeout(20s);
  collectives<fabric> coll(comm);
  const int r = comm.rank();
  const device::stream s{&dev, dev.make_stream()};
  device_array<std::int32_t> on_device(dev, 4096, 1);
  std::vector<std::int32_t> host(4096, 1);
  std::int32_t* data = r == 1 && host_input_on_rank_1 ? host.data() : on_device.data();
  std::string what = "succeeded";
  try {
    coll.allreduce(data, data, 4096, dtype::int32, reduce::op_kind::sum, on(s, "ring")).wait();
  } catch (const error& e) {
    what = e.what();
  }
  dev.synchronize(s.handle);
  dev.free_stream(s.handle);
  std::printf("rank %d: %s\n", r, what.c_str());
  return what != "succeeded" ? 0 : 1;
}

// Rank 1's input is host memory, which no peer can open: every rank fails the call, and
// the one that could not share says which buffer and why. The port takes host memory for
// its work here, so the call gets as far as sharing the buffer.
MIMATRIX_SCENARIO(unshareable_buffer) {
  return ring_allreduce_that_fails({.lag = 0us, .device_memory_only = false}, true);
}

// The same where the port refuses host memory (a GPU's): rank 1 names its buffer at the
// call's start (device::port::not_device_memory), before any peer could touch it.
MIMATRIX_SCENARIO(host_buffer_on_a_device_stream) {
  return ring_allreduce_that_fails({.lag = 0us, .device_memory_only = true}, true);
}

// A port whose memory the provider cannot register (named CUDA memory to a libfabric
// without CUDA support): every rank fails the call, saying which buffer and why.
MIMATRIX_SCENARIO(unregistrable_buffer) {
  return ring_allreduce_that_fails(
      {.lag = 0us, .device_memory_only = true, .network = {device::network_memory::interface::cuda, 0}}, false);
}

// GDRAA's allreduce (or reduce-scatter) on peers' memory: the last rank dies after it has
// told the others where its buffers lie (sync 1) and before its pass has run (its stream
// lags). The others' passes read (and an allreduce's write into) its memory, which stays
// mapped; their call fails within its deadline, naming the dead rank, instead of waiting
// for sync 2; their stream goes on.
int direct_call_where_a_peer_dies(bool scatter) {
  std::optional<device::host_port> port;  // made once the rank is known, and outlives the communicator
  communicator<fabric> comm;
  const int p = comm.size(), r = comm.rank();
  device::host_port& dev = port.emplace(device::host_port::settings{.lag = r == p - 1 ? 300ms : 0ms,
                                                                    .device_memory_only = true});
  collectives<fabric, topology::mesh> mesh(comm);
  const device::stream s{&dev, dev.make_stream()};
  constexpr std::size_t n = 4096;
  device_array<std::int32_t> data(dev, n * std::size_t(p), 1);
  std::vector<std::int32_t> seen;
  std::string what = "succeeded";
  const auto call = [&](const call_options& o) {
    std::int32_t* in = data.data();
    return scatter ? mesh.reduce_scatter(in, in + std::size_t(r) * n, n, dtype::int32, reduce::op_kind::sum, o)
                   : mesh.allreduce(in, in, n, dtype::int32, reduce::op_kind::sum, o);
  };
  try {
    call(on(s, "gdraa")).wait();
    dev.synchronize(s.handle);  // the next call's input is ready at once: its sync 1 goes out at once
    call_options bounded = on(s, "gdraa");
    bounded.timeout = 3000ms;
    auto pending = call(bounded);
    if (r == p - 1) {
      std::this_thread::sleep_for(150ms);  // sync 1 is out; the pass waits 600 ms behind two lags
      ::kill(::getpid(), SIGKILL);
    }
    dev.enqueue(s.handle, [&] { seen.assign(data.data(), data.data() + 4); });
    dev.synchronize(s.handle);  // returns: the failed call let the stream go
    pending.wait();
  } catch (const error& e) {
    what = "CAUGHT " + e.code().message() + ": " + e.what();
  }
  dev.free_stream(s.handle);
  std::printf("rank %d: %s (the stream went on: %s)\n", r, what.c_str(), seen.size() == 4 ? "yes" : "no");
  return what != "succeeded" && seen.size() == 4 ? 0 : 1;
}

MIMATRIX_SCENARIO(direct_peer_dies) { return direct_call_where_a_peer_dies(false); }
MIMATRIX_SCENARIO(direct_peer_dies_in_reduce_scatter) { return direct_call_where_a_peer_dies(true); }

// GDRAA's allreduce (or allgather) on peers' memory where rank 1 passes another count,
// or its broadcast where rank 2 names itself the root and the others rank 0: every rank
// fails with a mismatch instead of running passes over parts that do not line up (the
// broadcast's ranks waited out their deadline: only the root was told at sync 1), and
// over shm the call after it (the same everywhere) is exact. ASan once saw the message
// read after it was freed.
enum class disagreement { count, count_in_allgather, root };
int direct_call_that_disagrees(disagreement differs) {
  device::host_port dev({.lag = 0us, .device_memory_only = true});
  communicator<fabric> comm;
  comm.set_timeout(20s);
  collectives<fabric, topology::mesh> mesh(comm);
  const int p = comm.size(), r = comm.rank();
  const bool gather = differs == disagreement::count_in_allgather, cast = differs == disagreement::root;
  const device::stream s{&dev, dev.make_stream()};
  device_array<std::int32_t> data(dev, 3003, 1), all(dev, 3003 * std::size_t(p), 0);
  const auto call = [&](device_array<std::int32_t>& in, std::size_t count, int root) {
    if (cast) return mesh.broadcast(in.data(), in.data(), count, dtype::int32, root, on(s, "gdraa"));
    return gather ? mesh.allgather(in.data(), all.data(), count, dtype::int32, on(s, "gdraa"))
                  : mesh.allreduce(in.data(), in.data(), count, dtype::int32, reduce::op_kind::sum, on(s, "gdraa"));
  };
  const auto start = std::chrono::steady_clock::now();
  std::string what = "succeeded";
  try {
    call(data, !cast && r == 1 ? 3003 : 3000, cast && r == 2 ? 2 : 0).wait();
  } catch (const error& e) {
    what = "CAUGHT " + e.code().message() + ": " + e.what();
  }
  const bool in_time = std::chrono::steady_clock::now() - start < 10s;
  // Over the rxm providers a mismatch closes the endpoint on every rank (fabric/execution.hpp
  // says why), so the next call is tried over shm only.
  int wrong = 0;
  const bool next = comm.transport().provider() == "shm";
  device_array<std::int32_t> again(dev, 3000, 1);
  if (next) call(again, 3000, 0).wait();
  for (std::size_t i = 0; next && i < (gather ? 3000 * std::size_t(p) : again.size()); ++i)
    wrong += (gather ? all[i] : again[i]) != (gather || cast ? 1 : p);
  dev.free_stream(s.handle);
  std::printf("rank %d: %s%s; the next call %s\n", r, what.c_str(), in_time ? "" : " (after the deadline)",
              !next ? "not tried" : wrong ? "wrong" : "exact");
  return what != "succeeded" && !wrong && in_time ? 0 : 1;
}

MIMATRIX_SCENARIO(direct_mismatch) { return direct_call_that_disagrees(disagreement::count); }
MIMATRIX_SCENARIO(direct_mismatch_in_allgather) { return direct_call_that_disagrees(disagreement::count_in_allgather); }
MIMATRIX_SCENARIO(direct_mismatch_of_roots) { return direct_call_that_disagrees(disagreement::root); }

class device_sharing : public ::testing::TestWithParam<std::string> {};

// The mailboxes carry where the data lies; tcp has them only when asked.
const std::vector<std::pair<std::string, std::string>> mailboxes_on{{"MIMATRIX_MAILBOX", "on"}};
// Without them device calls stage through host memory.
const std::vector<std::pair<std::string, std::string>> mailboxes_off{{"MIMATRIX_MAILBOX", "off"}};

TEST_P(device_sharing, peers_read_each_others_device_buffers_exactly) {
  const auto result = test::run_ranks(3, GetParam(), "shared_collectives", mailboxes_on);
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(result.output[std::size_t(r)].find("shared device calls exact"), std::string::npos)
        << test::all_output(result);
}

// GDRAA's one pass needs no RMA window: without one (as for calls larger than the
// window's half, 128 MiB, issue 13's 256 MiB among them) the collectives once lowered its
// schedule, and peers then read each other's memory receiver-driven, 2.3 to 2.7 times the
// least traffic.
TEST_P(device_sharing, gdraas_one_pass_needs_no_rma_window) {
  auto env = mailboxes_on;
  env.emplace_back("MIMATRIX_WINDOW_BYTES", "0");
  const auto result = test::run_ranks(3, GetParam(), "shared_collectives", env);
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
}

TEST_P(device_sharing, a_split_part_reads_its_members_device_buffers_as_a_world_does) {
  const auto result = test::run_ranks(4, GetParam(), "split_device_calls", mailboxes_on, 60s);
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int r = 0; r < 4; ++r)
    EXPECT_NE(result.output[std::size_t(r)].find("split device calls exact"), std::string::npos)
        << test::all_output(result);
}

TEST_P(device_sharing, a_buffer_no_peer_can_open_fails_every_rank_and_is_named) {
  const auto result = test::run_ranks(3, GetParam(), "unshareable_buffer", mailboxes_on);
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  EXPECT_NE(result.output[1].find("cannot share its input buffer"), std::string::npos) << test::all_output(result);
  EXPECT_NE(result.output[1].find("rank 1"), std::string::npos) << test::all_output(result);
}

TEST_P(device_sharing, a_host_buffer_on_a_device_stream_fails_every_rank_and_is_named_by_its_rank) {
  const auto result = test::run_ranks(3, GetParam(), "host_buffer_on_a_device_stream", mailboxes_on);
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  EXPECT_NE(result.output[1].find("rank 1, allreduce #0: the input (16384 bytes) is host memory"), std::string::npos)
      << test::all_output(result);
}

TEST_P(device_sharing, a_peer_dead_in_a_direct_gdraa_call_fails_the_others_in_time_naming_it) {
  for (const char* scenario : {"direct_peer_dies", "direct_peer_dies_in_reduce_scatter"}) {
    const auto result = test::run_ranks(3, GetParam(), scenario, mailboxes_on, 60s);
    for (int r = 0; r < 2; ++r) {
      const std::string& out = result.output[std::size_t(r)];
      EXPECT_NE(out.find("CAUGHT"), std::string::npos) << scenario << "\n" << test::all_output(result);
      EXPECT_NE(out.find("rank 2"), std::string::npos) << scenario << "\n" << test::all_output(result);
      EXPECT_NE(out.find("the stream went on: yes"), std::string::npos) << scenario << "\n" << test::all_output(result);
    }
  }
}

TEST_P(device_sharing, gdraas_passes_in_flight_on_one_stream_each_meet_their_own_call) {
  const auto result = test::run_ranks(3, GetParam(), "direct_calls_in_flight", mailboxes_on, 60s);
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(result.output[std::size_t(r)].find("calls in flight exact"), std::string::npos)
        << test::all_output(result);
}

TEST_P(device_sharing, calls_on_two_streams_and_a_host_call_in_flight_are_exact) {
  const auto result = test::run_ranks(4, GetParam(), "two_streams_in_flight", mailboxes_on, 60s);
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int r = 0; r < 4; ++r)
    EXPECT_NE(result.output[std::size_t(r)].find("two streams in flight exact"), std::string::npos)
        << test::all_output(result);
}

TEST_P(device_sharing, a_call_failing_behind_an_earlier_call_on_its_stream_lets_both_end) {
  for (const auto& [algorithm, mailboxes] : {std::pair{"ring", mailboxes_on}, {"", mailboxes_on}, {"", mailboxes_off}}) {
    auto env = mailboxes;
    env.emplace_back("MIMATRIX_TEST_ALGORITHM", algorithm);
    const auto result = test::run_ranks(3, GetParam(), "failure_behind_a_pending_call", env, 60s);
    EXPECT_EQ(result.exit_code, 0) << algorithm << ", mailboxes " << env[0].second << "\n" << test::all_output(result);
  }
}

// As GDRAA's one pass (automatic's choice), as a ring reading peers' memory, and staged
// through host memory (no mailboxes).
TEST_P(device_sharing, an_abort_fails_device_calls_in_flight_and_lets_their_streams_go) {
  for (const auto& [algorithm, mailboxes] : {std::pair{"", mailboxes_on}, {"ring", mailboxes_on}, {"", mailboxes_off}}) {
    auto env = mailboxes;
    env.emplace_back("MIMATRIX_TEST_ALGORITHM", algorithm);
    const auto result = test::run_ranks(3, GetParam(), "device_call_aborted", env, 60s);
    const std::string label = std::string(*algorithm ? algorithm : "automatic") + ", mailboxes " + env[0].second;
    EXPECT_EQ(result.exit_code, 0) << label << "\n" << test::all_output(result);
    for (int r = 0; r < 3; ++r) {
      const std::string& out = result.output[std::size_t(r)];
      EXPECT_NE(out.find("CAUGHT aborted"), std::string::npos) << label << "\n" << test::all_output(result);
      EXPECT_NE(out.find("rank 1 aborted the communicator: watchdog saw no progress"), std::string::npos)
          << label << "\n" << test::all_output(result);
      EXPECT_NE(out.find("the stream went on: yes"), std::string::npos) << label << "\n" << test::all_output(result);
    }
  }
}

TEST_P(device_sharing, ranks_that_disagree_in_a_direct_gdraa_call_all_fail_with_a_mismatch) {
  for (const char* scenario : {"direct_mismatch", "direct_mismatch_in_allgather", "direct_mismatch_of_roots"}) {
    const auto result = test::run_ranks(3, GetParam(), scenario, mailboxes_on);
    EXPECT_EQ(result.exit_code, 0) << scenario << "\n" << test::all_output(result);
    for (int r = 0; r < 3; ++r) {
      const std::string& out = result.output[std::size_t(r)];
      EXPECT_NE(out.find("CAUGHT ranks disagree on the collective"), std::string::npos) << test::all_output(result);
      EXPECT_EQ(out.find(", 0 bytes:"), std::string::npos) << "the part's bytes, not the wait step's\n"
                                                          << test::all_output(result);
      if (GetParam() == "shm") {
        EXPECT_NE(out.find("the next call exact"), std::string::npos) << scenario << "\n" << test::all_output(result);
      }
    }
  }
}

// Without mailboxes, a provider that moves device memory (FI_HMEM; shm grants it, for
// host memory) sends and receives the device buffers as they are.
const std::vector<std::pair<std::string, std::string>> provider_moves{
    {"MIMATRIX_MAILBOX", "off"}, {"MIMATRIX_BULK", "off"}, {"MIMATRIX_DEVICE_HMEM", "on"}};

TEST(device_network_memory, the_provider_moves_device_buffers_exactly_with_no_host_copy) {
  const auto result = test::run_ranks(3, "shm", "shared_collectives", provider_moves);
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(result.output[std::size_t(r)].find("shared device calls exact"), std::string::npos)
        << test::all_output(result);
}

TEST(device_network_memory, memory_the_provider_cannot_register_fails_every_rank_and_is_named) {
  const auto result = test::run_ranks(3, "shm", "unregistrable_buffer", provider_moves);
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int r = 0; r < 3; ++r) {
    const std::string& out = result.output[std::size_t(r)];
    EXPECT_NE(out.find("rank " + std::to_string(r) + ": allreduce"), std::string::npos) << test::all_output(result);
    EXPECT_NE(out.find("cannot register its input device buffer"), std::string::npos) << test::all_output(result);
    EXPECT_NE(out.find("MIMATRIX_DEVICE_HMEM=0"), std::string::npos) << test::all_output(result);
  }
}

INSTANTIATE_TEST_SUITE_P(fabric, device_sharing, ::testing::ValuesIn(test::test_providers()),
                         [](const auto& info) { return test::provider_label(info.param); });

}  // namespace
}  // namespace mimatrix
