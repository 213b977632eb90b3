// An allreduce on device buffers over ranks of several hosts (detail/across_hosts.hpp):
// two hosts of two ranks on this machine (MIMATRIX_HOST_ID), whose ranks read each other's
// blocks within a host (the host port's memory, as CUDA IPC) and reach the other host only
// through the network. The call reduce-scatters within each host, allreduces a share a
// rank across the hosts, and allgathers within each host again, on the caller's stream:
// exact, in place and not, with a late producer before it and a consumer after it, for
// counts that leave elements past the last whole share, and with only a share of the
// buffer through host memory (flat staging moves all of it twice). Hosts of different
// sizes run the call flat, and as exactly. A broadcast from every root, and an allgather
// and a reduce-scatter where ranks are numbered host by host, cross the network once a
// host and a part, and are exact (reduce-scatters in flight on two streams each take
// scratch of their own); ranks interleaved over the hosts gather and scatter flat.
#include "mimatrix/transport/fabric.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/device/host_port.hpp"
#include "multi_process.hpp"
#include "support/device_array.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using test::device_array;
using transport::fabric;

/// Ranks 0 and 1 on one host, the others on a second (MIMATRIX_HOST_ID, set before the
/// communicator opens), with device buffers of a host port on a stream of its own.
struct two_hosts {
  explicit two_hosts(std::chrono::milliseconds timeout) { comm.set_timeout(timeout); }
  ~two_hosts() { dev.free_stream(s.handle); }
  /// By halves; by rank parity where the test asks for ranks interleaved over the hosts.
  static bool placed() {
    const char* given = std::getenv("RANK");
    const int rank = given ? std::atoi(given) : 0;
    const bool first = std::getenv("INTERLEAVED_HOSTS") ? rank % 2 == 0 : rank < 2;
    return ::setenv("MIMATRIX_HOST_ID", first ? "first" : "second", 1) == 0;
  }

  bool placed_ = placed();
  device::host_port dev{{.lag = 20us, .device_memory_only = true}};  // before the communicator
  communicator<fabric> comm;
  collectives<fabric> coll{comm};
  const int p = comm.size(), r = comm.rank();
  const device::stream s{&dev, dev.make_stream()};
  const call_options on_stream{.algorithm = {}, .timeout = {}, .stream = s, .tag = 0};

  /// An allreduce of `data` (each rank's r + 1) through to its stream: every group within
  /// and across the hosts has met before the call a scenario tests.
  void warm_up(device_array<std::int64_t>& data) {
    coll.allreduce(data.data(), data.data(), data.size(), dtype::int64, reduce::op_kind::sum, on_stream).wait();
    dev.synchronize(s.handle);
  }
};

/// "succeeded", or "CAUGHT <code>: <what>" for the error that `call` threw.
template <class Call>
std::string outcome(Call&& call) {
  try {
    call();
  } catch (const error& e) {
    return "CAUGHT " + e.code().message() + ": " + e.what();
  }
  return "succeeded";
}

MIMATRIX_SCENARIO(allreduce_across_hosts) {
  two_hosts job(30s);
  [[maybe_unused]] auto& [placed, dev, comm, coll, p, r, s, on_stream] = job;
  const bool composed = p % 2 == 0;  // hosts of two ranks each; else of two and one: flat
  int wrong = 0;

  for (const std::size_t n : {std::size_t(1), std::size_t(4097), std::size_t(200'000)})
    for (const bool in_place : {false, true}) {
      device_array<std::int64_t> in(dev, n), out(dev, n);
      std::int64_t* result = in_place ? in.data() : out.data();
      dev.enqueue(s.handle, [&] {  // a late producer; a landing before it would be lost
        std::this_thread::sleep_for(5ms);
        for (std::size_t i = 0; i < n; ++i) in[i] = std::int64_t(i % 1000) * (r + 1) - r;
        if (!in_place)
          for (std::size_t i = 0; i < n; ++i) out[i] = -7;
      });
      const std::size_t before = dev.host_copy_bytes();
      auto pending = coll.allreduce(in.data(), result, n, dtype::int64, reduce::op_kind::sum, on_stream);
      std::vector<std::int64_t> seen(n);
      dev.enqueue(s.handle, [&] { std::memcpy(seen.data(), result, n * sizeof(std::int64_t)); });
      dev.synchronize(s.handle);
      pending.wait();
      const std::size_t moved = dev.host_copy_bytes() - before;
      for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t want = std::int64_t(i % 1000) * (p * (p + 1) / 2) - p * (p - 1) / 2;
        if (seen[i] != want && wrong++ < 3)
          std::printf("rank %d: %zu elements%s, element %zu: %lld, not %lld\n", r, n, in_place ? " in place" : "",
                      i, static_cast<long long>(seen[i]), static_cast<long long>(want));
      }
      // A share of n / 2 in and out, against the whole buffer in and out when flat.
      const std::size_t bytes = n * sizeof(std::int64_t);
      if (n == 200'000 && (composed ? moved > bytes : moved < 2 * bytes)) {
        ++wrong;
        std::printf("rank %d: %zu bytes went through host memory for %zu%s\n", r, moved, bytes,
                    composed ? ": more than a share in and out" : ": less than flat staging moves");
      }
    }

  // avg sums at both stages and divides once by all the ranks, as the flat call does:
  // averaging at each stage would give an integer mean of 2, 1, 1, 0 as 0, not 1.
  if (composed) {
    device_array<float> grads(dev, 10'001, float(r + 1));
    coll.allreduce(grads.data(), grads.data(), grads.size(), dtype::float32, reduce::op_kind::avg, on_stream).wait();
    device_array<std::int64_t> counts(dev, 10'001, std::int64_t(r == 0 ? 2 : r == 3 ? 0 : 1));
    coll.allreduce(counts.data(), counts.data(), counts.size(), dtype::int64, reduce::op_kind::avg, on_stream).wait();
    dev.synchronize(s.handle);
    for (std::size_t i = 0; i < grads.size(); ++i) wrong += grads[i] != float(p + 1) / 2;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (counts[i] != 1 && wrong++ < 3)
        std::printf("rank %d: integer avg, element %zu: %lld, not 1\n", r, i, static_cast<long long>(counts[i]));
    }
    // Buffers that overlap without being in place are refused on every rank before any part starts.
    try {
      coll.allreduce(counts.data(), counts.data() + 1, 1000, dtype::int64, reduce::op_kind::sum, on_stream).wait();
      ++wrong;
      std::printf("rank %d: overlapping buffers were taken\n", r);
    } catch (const error& e) {
      wrong += e.code() != errc::invalid_argument;
    }
    device_array<std::int32_t> peaks(dev, 999, 0);
    for (std::size_t i = 0; i < peaks.size(); ++i) peaks[i] = std::int32_t(i) * (r == int(i) % p ? 10 : 1);
    coll.allreduce(peaks.data(), peaks.data(), peaks.size(), dtype::int32, reduce::op_kind::max, on_stream).wait();
    dev.synchronize(s.handle);
    for (std::size_t i = 0; i < peaks.size(); ++i) wrong += peaks[i] != std::int32_t(i) * (i == 0 ? 1 : 10);
  }

  if (wrong == 0) std::printf("rank %d: across hosts exact\n", r);
  return wrong == 0 ? 0 : 1;
}

// What a rank's part of an allgather, and a broadcast's root, hold: distinct by rank.
std::int64_t part_value(int rank, std::size_t i) { return std::int64_t(i % 977) * 4 + rank + 1; }

MIMATRIX_SCENARIO(composed_collectives_across_hosts) {
  two_hosts job(30s);
  [[maybe_unused]] auto& [placed, dev, comm, coll, p, r, s, on_stream] = job;
  const bool interleaved = std::getenv("INTERLEAVED_HOSTS") != nullptr;
  const bool broadcasts_compose = p % 2 == 0, gathers_compose = broadcasts_compose && !interleaved;
  int wrong = 0;
  const auto report = [&](bool bad, const std::string& what) {
    if (bad && wrong++ < 5) std::printf("rank %d: %s\n", r, what.c_str());
  };

  for (const std::size_t n : {std::size_t(1), std::size_t(3001), std::size_t(50'000)})
    for (const bool in_place : {false, true}) {
      device_array<std::int64_t> in(dev, n), all(dev, n * std::size_t(p));
      const std::int64_t* mine = in_place ? all.data() + std::size_t(r) * n : in.data();
      dev.enqueue(s.handle, [&] {  // a late producer, which also clears the output
        std::this_thread::sleep_for(5ms);
        for (std::size_t i = 0; i < all.size(); ++i) all[i] = -7;
        for (std::size_t i = 0; i < n; ++i) const_cast<std::int64_t*>(mine)[i] = part_value(r, i);
      });
      const std::size_t before = dev.host_copy_bytes();
      auto pending = coll.allgather(mine, all.data(), n, dtype::int64, on_stream);
      std::vector<std::int64_t> seen(all.size());
      dev.enqueue(s.handle, [&] { std::memcpy(seen.data(), all.data(), seen.size() * sizeof(std::int64_t)); });
      dev.synchronize(s.handle);
      pending.wait();
      const std::size_t moved = dev.host_copy_bytes() - before, bytes = n * sizeof(std::int64_t);
      for (std::size_t g = 0; g < std::size_t(p); ++g)
        for (std::size_t i = 0; i < n; ++i)
          report(seen[g * n + i] != part_value(int(g), i),
                 "allgather of " + std::to_string(n) + (in_place ? " in place" : "") + ": rank " + std::to_string(g) +
                     "'s element " + std::to_string(i) + " is " + std::to_string(seen[g * n + i]));
      // Composed, a rank stages its part out and back (the root of a staged broadcast
      // takes its output from the staging too) and the other host's part in; flat, its
      // part out and the whole output in.
      if (n == 50'000)
        report(gathers_compose ? moved > 3 * bytes : moved < std::size_t(p + 1) * bytes,
               "allgather moved " + std::to_string(moved) + " bytes through host memory for parts of " +
                   std::to_string(bytes));
    }

  for (const std::size_t n : {std::size_t(1), std::size_t(100'000)})
    for (int root = 0; root < p; ++root) {
      device_array<std::int64_t> data(dev, n, -1);
      if (r == root)
        for (std::size_t i = 0; i < n; ++i) data[i] = part_value(root, i);
      const std::size_t before = dev.host_copy_bytes();
      coll.broadcast(r == root ? data.data() : nullptr, data.data(), n, dtype::int64, root, on_stream).wait();
      dev.synchronize(s.handle);
      const std::size_t moved = dev.host_copy_bytes() - before, bytes = n * sizeof(std::int64_t);
      for (std::size_t i = 0; i < n; ++i)
        report(data[i] != part_value(root, i), "broadcast of " + std::to_string(n) + " from rank " +
                                                   std::to_string(root) + ": element " + std::to_string(i) + " is " +
                                                   std::to_string(data[i]));
      // Composed, the data crosses the host staging on the root and on the rank of its
      // local index on the other host, and on no other rank; flat, on every rank.
      const auto local_index = [&](int g) { return interleaved ? g / 2 : g % 2; };
      const std::size_t carried = local_index(r) == local_index(root) ? bytes : 0;
      if (n == 100'000 && r != root)
        report(broadcasts_compose ? moved > carried : moved < bytes,
               "broadcast from rank " + std::to_string(root) + " moved " + std::to_string(moved) +
                   " bytes through host memory for " + std::to_string(bytes));
    }

  // Rank q's part g of a reduce-scatter's input holds part_value(q, g · n + i).
  const auto scatter_sum = [&](std::size_t at) {
    std::int64_t sum = 0;
    for (int q = 0; q < p; ++q) sum += part_value(q, at);
    return sum;
  };
  for (const std::size_t n : {std::size_t(1), std::size_t(3001), std::size_t(50'000)})
    for (const bool in_place : {false, true}) {
      device_array<std::int64_t> whole(dev, n * std::size_t(p)), part(dev, n);
      std::int64_t* result = in_place ? whole.data() + std::size_t(r) * n : part.data();
      dev.enqueue(s.handle, [&] {
        std::this_thread::sleep_for(5ms);
        for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = part_value(r, i);
        if (!in_place)
          for (std::size_t i = 0; i < n; ++i) part[i] = -7;
      });
      const std::size_t before = dev.host_copy_bytes();
      auto pending = coll.reduce_scatter(whole.data(), result, n, dtype::int64, reduce::op_kind::sum, on_stream);
      std::vector<std::int64_t> seen(n);
      dev.enqueue(s.handle, [&] { std::memcpy(seen.data(), result, n * sizeof(std::int64_t)); });
      dev.synchronize(s.handle);
      pending.wait();
      const std::size_t moved = dev.host_copy_bytes() - before, bytes = n * sizeof(std::int64_t);
      for (std::size_t i = 0; i < n; ++i)
        report(seen[i] != scatter_sum(std::size_t(r) * n + i),
               "reduce-scatter of " + std::to_string(n) + (in_place ? " in place" : "") + ": element " +
                   std::to_string(i) + " is " + std::to_string(seen[i]));
      // Composed, a rank stages the H parts of its scratch out and its part in; flat, the
      // whole input out and its part in.
      if (n == 50'000)
        report(gathers_compose ? moved > 3 * bytes : moved < std::size_t(p + 1) * bytes,
               "reduce-scatter moved " + std::to_string(moved) + " bytes through host memory for parts of " +
                   std::to_string(bytes));
    }
  {  // avg sums at both stages and divides once: 2, 1, 1, 0 average to 1, not 0
    const auto value = [](int q) { return std::int64_t(q == 0 ? 2 : q == 3 ? 0 : 1); };
    std::int64_t sum = 0;
    for (int q = 0; q < p; ++q) sum += value(q);
    device_array<std::int64_t> whole(dev, 1001 * std::size_t(p), value(r)), part(dev, 1001);
    coll.reduce_scatter(whole.data(), part.data(), 1001, dtype::int64, reduce::op_kind::avg, on_stream).wait();
    dev.synchronize(s.handle);
    for (std::size_t i = 0; i < part.size(); ++i)
      report(part[i] != sum / p, "integer avg reduce-scatter: " + std::to_string(part[i]));
  }
  {  // calls in flight on two streams, lagging, never waited for in between: each needs scratch of its own
    const device::stream other{&dev, dev.make_stream()};
    constexpr std::size_t n = 20'000;
    std::vector<std::unique_ptr<device_array<std::int64_t>>> wholes, parts;
    std::vector<request> in_flight;
    for (int c = 0; c < 4; ++c) {
      wholes.push_back(std::make_unique<device_array<std::int64_t>>(dev, n * std::size_t(p)));
      parts.push_back(std::make_unique<device_array<std::int64_t>>(dev, n, -7));
      for (std::size_t i = 0; i < wholes.back()->size(); ++i) (*wholes.back())[i] = part_value(r, i) + c;
      const device::stream& on = c % 2 ? other : s;
      in_flight.push_back(coll.reduce_scatter(wholes.back()->data(), parts.back()->data(), n, dtype::int64,
                                              reduce::op_kind::sum,
                                              {.algorithm = {}, .timeout = {}, .stream = on, .tag = 0}));
    }
    dev.synchronize(s.handle);
    dev.synchronize(other.handle);
    for (auto& q : in_flight) q.wait();
    for (int c = 0; c < 4; ++c)
      for (std::size_t i = 0; i < n; ++i)
        report((*parts[std::size_t(c)])[i] != scatter_sum(std::size_t(r) * n + i) + p * c,
               "reduce-scatter " + std::to_string(c) + " in flight on two streams: element " + std::to_string(i) +
                   " is " + std::to_string((*parts[std::size_t(c)])[i]));
    dev.free_stream(other.handle);
  }

  if (gathers_compose) {  // overlapping buffers are refused on every rank before any part starts
    device_array<std::int64_t> all(dev, 400);
    try {
      coll.allgather(all.data() + 1, all.data(), 100, dtype::int64, on_stream).wait();
      report(true, "overlapping allgather buffers were taken");
    } catch (const error& e) {
      report(e.code() != errc::invalid_argument, std::string("overlap refused as ") + e.what());
    }
    try {
      coll.reduce_scatter(all.data(), all.data() + 1, 100, dtype::int64, reduce::op_kind::sum, on_stream).wait();
      report(true, "overlapping reduce-scatter buffers were taken");
    } catch (const error& e) {
      report(e.code() != errc::invalid_argument, std::string("overlap refused as ") + e.what());
    }
  }
  if (wrong == 0) std::printf("rank %d: across hosts exact\n", r);
  return wrong == 0 ? 0 : 1;
}

// Rank 3 ends after the first call. Rank 1's share of the second fails across the hosts
// (its peer there is rank 3); its allgather must not then hand rank 0 a share that was
// never reduced across the hosts: every surviving rank's call fails, none succeeds with
// wrong data, and each stream goes on. The same for an allgather, and for a broadcast
// whose root's peer across the hosts is rank 3 (its host's other rank must fail too).
MIMATRIX_SCENARIO(across_hosts_peer_dies) {
  two_hosts job(5s);
  [[maybe_unused]] auto& [placed, dev, comm, coll, p, r, s, on_stream] = job;
  device_array<std::int64_t> data(dev, 100'000, r + 1);
  job.warm_up(data);
  if (r == 3) std::_Exit(0);
  const std::string collective = std::getenv("COLLECTIVE") ? std::getenv("COLLECTIVE") : "allreduce";
  device_array<std::int64_t> all(dev, data.size() * std::size_t(p));
  const std::string what = outcome([&] {
    if (collective == "allgather")  // rank 1's broadcast from the other host fails; its gathers must too
      coll.allgather(data.data(), all.data(), data.size(), dtype::int64, on_stream).wait();
    else if (collective == "reduce_scatter")  // rank 2 fails within its host, rank 1 across: rank 0 must fail too
      coll.reduce_scatter(all.data(), data.data(), data.size(), dtype::int64, reduce::op_kind::sum, on_stream).wait();
    else if (collective == "broadcast")  // from rank 1, whose peer across is rank 3: rank 0's part within must fail too
      coll.broadcast(r == 1 ? data.data() : nullptr, data.data(), data.size(), dtype::int64, 1, on_stream).wait();
    else
      coll.allreduce(data.data(), data.data(), data.size(), dtype::int64, reduce::op_kind::sum, on_stream).wait();
  });
  dev.synchronize(s.handle);  // the stream goes on
  std::printf("rank %d: %s\n", r, what.c_str());
  return 0;
}

// Rank 1 names root 2, the others root 0: both of local index 0, so every part of rank
// 1's broadcast matched its peers' parts, and it took rank 0's data for rank 2's without a
// word (a black-box test). No rank may end with another root's data and no error.
MIMATRIX_SCENARIO(across_hosts_roots_disagree) {
  two_hosts job(5s);
  [[maybe_unused]] auto& [placed, dev, comm, coll, p, r, s, on_stream] = job;
  device_array<std::int64_t> data(dev, 10'001, r + 1);
  job.warm_up(data);
  const int root = r == 1 ? 2 : 0;
  dev.enqueue(s.handle, [&] { std::fill_n(data.data(), data.size(), std::int64_t(100 + r)); });
  std::string what = outcome([&] {
    coll.broadcast(data.data(), data.data(), data.size(), dtype::int64, root, on_stream).wait();
    dev.synchronize(s.handle);
  });
  if (what == "succeeded")
    what = data[0] == 100 + root && data[data.size() - 1] == 100 + root ? "root's data" : "OTHER data";
  dev.synchronize(s.handle);
  std::printf("rank %d: %s\n", r, what.c_str());
  return 0;
}

// Rank 1 alone gives the collective COLLECTIVE host memory (BAD=host) or overlapping
// buffers (BAD=overlap), with a count that leaves elements past the last whole share: it
// refuses the call, naming the whole call, and every other rank fails it at once rather
// than wait out the deadline in a part that rank 1 never started (the flat call of the
// allreduce's tail did: a black-box test).
MIMATRIX_SCENARIO(across_hosts_one_rank_refuses) {
  two_hosts job(20s);
  [[maybe_unused]] auto& [placed, dev, comm, coll, p, r, s, on_stream] = job;
  constexpr std::size_t n = 10'001;
  const std::string collective = std::getenv("COLLECTIVE");
  const bool overlap = std::string(std::getenv("BAD")) == "overlap", bad = r == 1;
  device_array<std::int64_t> in(dev, n * std::size_t(p), r + 1), out(dev, n * std::size_t(p));
  std::vector<std::int64_t> host(n * std::size_t(p), r + 1);
  // Rank 1's input (its output for a broadcast from rank 0; from rank 1 where it overlaps).
  const std::int64_t* input = !bad ? in.data() : overlap ? out.data() + 1 : host.data();
  std::int64_t* output = bad && !overlap ? host.data() : out.data();
  const auto start = std::chrono::steady_clock::now();
  const std::string what = outcome([&] {
    if (collective == "allreduce")
      coll.allreduce(input, out.data(), n, dtype::int64, reduce::op_kind::sum, on_stream).wait();
    else if (collective == "reduce_scatter")
      coll.reduce_scatter(input, out.data(), n, dtype::int64, reduce::op_kind::sum, on_stream).wait();
    else if (collective == "allgather")
      coll.allgather(input, out.data(), n, dtype::int64, on_stream).wait();
    else
      coll.broadcast(in.data(), bad && overlap ? in.data() + 1 : output, n, dtype::int64, overlap ? 1 : 0, on_stream)
          .wait();
  });
  const auto took = std::chrono::steady_clock::now() - start;
  dev.synchronize(s.handle);
  std::printf("rank %d: %s after %lld ms\n", r, what.c_str(),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  return took < 10s ? 0 : 1;
}

// communicator::abort() on rank 0 while the others wait in a call for rank 3 (late): the
// parts in flight on the split groups end too, on every rank, long before the deadline.
MIMATRIX_SCENARIO(across_hosts_abort) {
  two_hosts job(30s);
  [[maybe_unused]] auto& [placed, dev, comm, coll, p, r, s, on_stream] = job;
  device_array<std::int64_t> data(dev, 100'000, r + 1);
  job.warm_up(data);
  if (r == 3) std::this_thread::sleep_for(1500ms);
  std::thread watchdog;
  if (r == 0)
    watchdog = std::thread([&] {
      std::this_thread::sleep_for(300ms);
      comm.abort("the test's watchdog");
    });
  const auto start = std::chrono::steady_clock::now();
  const std::string what = outcome([&] {
    coll.allreduce(data.data(), data.data(), data.size(), dtype::int64, reduce::op_kind::sum, on_stream).wait();
  });
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  if (watchdog.joinable()) watchdog.join();
  dev.synchronize(s.handle);
  std::printf("rank %d: %s after %lld ms\n", r, what.c_str(), static_cast<long long>(took.count()));
  return took < 10s ? 0 : 1;
}

class device_across_hosts : public ::testing::TestWithParam<std::string> {};

void expect_exact(const bootstrap::launch_result& result, int ranks) {
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int r = 0; r < ranks; ++r)
    EXPECT_NE(result.output[std::size_t(r)].find("across hosts exact"), std::string::npos) << test::all_output(result);
}

TEST_P(device_across_hosts, an_allreduce_runs_within_each_host_through_device_memory_and_a_share_across) {
  expect_exact(test::run_ranks(4, GetParam(), "allreduce_across_hosts"), 4);
}

TEST_P(device_across_hosts, hosts_of_different_sizes_run_it_flat) {
  expect_exact(test::run_ranks(3, GetParam(), "allreduce_across_hosts"), 3);
}

TEST_P(device_across_hosts, a_broadcast_an_allgather_and_a_reduce_scatter_cross_the_network_once_a_host) {
  expect_exact(test::run_ranks(4, GetParam(), "composed_collectives_across_hosts"), 4);
}

TEST_P(device_across_hosts, ranks_interleaved_over_hosts_gather_and_scatter_flat_and_broadcast_across) {
  expect_exact(test::run_ranks(4, GetParam(), "composed_collectives_across_hosts", {{"INTERLEAVED_HOSTS", "1"}}), 4);
}

TEST_P(device_across_hosts, hosts_of_different_sizes_run_the_other_collectives_flat) {
  expect_exact(test::run_ranks(3, GetParam(), "composed_collectives_across_hosts"), 3);
}

TEST_P(device_across_hosts, a_rank_that_dies_fails_every_survivors_call_and_none_succeeds_with_a_share_unreduced) {
  const auto result = test::run_ranks(4, GetParam(), "across_hosts_peer_dies", {}, 60s);
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(result.output[std::size_t(r)].find("CAUGHT"), std::string::npos) << test::all_output(result);
}

TEST_P(device_across_hosts, a_rank_that_dies_fails_every_survivors_other_collectives) {
  for (const char* collective : {"allgather", "reduce_scatter", "broadcast"}) {
    const auto result = test::run_ranks(4, GetParam(), "across_hosts_peer_dies", {{"COLLECTIVE", collective}}, 60s);
    for (int r = 0; r < 3; ++r)
      EXPECT_NE(result.output[std::size_t(r)].find("CAUGHT"), std::string::npos) << collective << "\n"
                                                                                  << test::all_output(result);
  }
}

TEST_P(device_across_hosts, ranks_that_name_roots_of_one_local_index_on_two_hosts_never_take_the_wrong_data) {
  const auto result = test::run_ranks(4, GetParam(), "across_hosts_roots_disagree", {}, 60s);
  EXPECT_NE(result.output[1].find("CAUGHT ranks disagree"), std::string::npos) << test::all_output(result);
  // The parts' tag, which the mismatch prints, is read for the reader: it carries the root.
  EXPECT_NE(result.output[1].find("carries root 2: another tag there is another root"), std::string::npos)
      << test::all_output(result);
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(result.output[std::size_t(r)].find("OTHER data"), std::string::npos) << test::all_output(result);
}

TEST_P(device_across_hosts, a_call_that_one_rank_refuses_fails_on_every_rank_at_once) {
  for (const auto& [collective, bad] : {std::pair{"allreduce", "host"}, std::pair{"reduce_scatter", "overlap"},
                                        std::pair{"allgather", "host"}, std::pair{"broadcast", "overlap"}}) {
    const auto result = test::run_ranks(4, GetParam(), "across_hosts_one_rank_refuses",
                                        {{"COLLECTIVE", collective}, {"BAD", bad}}, 60s);
    EXPECT_EQ(result.exit_code, 0) << collective << "\n" << test::all_output(result);
    for (int r = 0; r < 4; ++r)
      EXPECT_NE(result.output[std::size_t(r)].find("CAUGHT invalid argument"), std::string::npos)
          << collective << "\n" << test::all_output(result);
    // Named as the whole call, not as one of its parts on a group of its own.
    EXPECT_NE(result.output[1].find(" across 2 hosts: the "), std::string::npos) << test::all_output(result);
  }
}

TEST_P(device_across_hosts, an_abort_ends_the_parts_in_flight_on_every_rank) {
  const auto result = test::run_ranks(4, GetParam(), "across_hosts_abort", {}, 60s);
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int r = 0; r < 4; ++r)
    EXPECT_NE(result.output[std::size_t(r)].find("CAUGHT"), std::string::npos) << test::all_output(result);
  EXPECT_NE(result.output[0].find("CAUGHT aborted"), std::string::npos) << test::all_output(result);
}

INSTANTIATE_TEST_SUITE_P(fabric, device_across_hosts, ::testing::ValuesIn(test::test_providers()),
                         [](const auto& info) { return test::provider_label(info.param); });

}  // namespace
}  // namespace mimatrix
