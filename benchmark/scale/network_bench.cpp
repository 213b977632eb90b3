// Timing of transport/simulated/network.hpp at the scale of a 4096-rank ring allreduce:
// rounds of 4096 flows that start together, over private links and over a fat tree.
//
//   network_bench [rounds [cases]]   rounds: 8190 by default; cases: any of "abcdef"
//
// (a) private links, (b)/(c) fat tree with ECMP hashing, (d) fat tree with equal rates,
// (e) one finish at a time, (f) a ring both ways (one component). Prints CPU time a
// round (the least over blocks of 200 rounds, so that other work on the machine counts
// as little as it can, and the mean) and the least times 8190, a 4096-rank ring
// allreduce's steps.
#include "mimatrix/transport/simulated/network.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

namespace {

using mimatrix::transport::simulated::flow_id;
using mimatrix::transport::simulated::link_id;
using mimatrix::transport::simulated::network;

constexpr int ranks = 4096;
constexpr int leaves = 64, hosts = 64, spines = 32;  // hosts a leaf
constexpr double host_bytes_per_second = 50e9;      // 400 Gb/s NICs
constexpr double step_bytes = 1 << 20;

struct result {
  double seconds_per_round;  // least over the blocks
  double mean_per_round;     // over all of them
  double batches_per_round;  // next_finish()/finish_until() pairs: distinct finish times
};

// Each round starts one flow a rank and runs the network until all have finished, one
// next_finish()/finish_until() pair a distinct finish time, as the simulator will.
template <class Paths>
result run(network& net, int rounds, Paths&& path_of, int flows = ranks) {
  std::vector<flow_id> done;
  done.reserve(static_cast<std::size_t>(flows));
  std::vector<link_id> path;
  double now = 0;
  long batches = 0;
  double best = 1e300, total = 0;
  const int block = std::max(1, std::min(rounds, 200));
  for (int round = 0; round < rounds;) {
    const std::clock_t c0 = std::clock();
    const int end = std::min(rounds, round + block);
    const int n = end - round;
    for (; round < end; ++round) {
      for (int i = 0; i < flows; ++i) {
        path_of(i, round, path);
        (void)net.start(path, step_bytes, now);
      }
      for (std::size_t finished = 0; finished < static_cast<std::size_t>(flows); finished += done.size(), ++batches) {
        now = net.next_finish();
        done.clear();
        net.finish_until(now, done);
      }
    }
    const double seconds = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    best = std::min(best, seconds / n);
    total += seconds;
  }
  return {best, total / rounds, static_cast<double>(batches) / rounds};
}

void report(const char* name, int rounds, result r) {
  std::printf("%-44s %5d rounds: %7.1f us/round (mean %7.1f), %5.2f batches/round, %6.3f s for 8190 rounds\n",
              name, rounds, r.seconds_per_round * 1e6, r.mean_per_round * 1e6, r.batches_per_round,
              r.seconds_per_round * 8190);
}

std::uint32_t mix(std::uint32_t x) {  // a stand-in for a switch's ECMP hash
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// 64 leaves x 64 hosts, 32 spines. Rank r is host r / 64 of leaf r % 64 and sends to rank
// r + 1 (and r - 1 if `both_ways`), on another leaf, so every flow crosses a spine: host
// up, leaf to spine, spine to leaf, host down. `spine_of(src, dst, round)` picks the spine.
// One way, a host's links carry one flow each, so flows meet only at a spine and the
// network is a component a spine; both ways, it is one component.
template <class Spine>
result fat_tree(int rounds, double uplink_bytes_per_second, Spine&& spine_of, bool both_ways = false) {
  const int flows = both_ways ? 2 * ranks : ranks;
  network net;
  net.reserve(2 * ranks + 2 * leaves * spines, static_cast<std::size_t>(flows));
  auto add = [&](int n, double bw) {
    const auto first = static_cast<link_id>(net.links());
    for (int i = 0; i < n; ++i) (void)net.add_link({bw, 1e-6});
    return first;
  };
  const link_id host_up = add(ranks, host_bytes_per_second), host_down = add(ranks, host_bytes_per_second);
  const link_id leaf_up = add(leaves * spines, uplink_bytes_per_second);
  const link_id spine_down = add(leaves * spines, uplink_bytes_per_second);
  auto host = [](int rank) { return (rank % leaves) * hosts + rank / leaves; };
  return run(net, rounds, [&](int i, int round, std::vector<link_id>& p) {
    const int rank = i % ranks, peer = i < ranks ? (rank + 1) % ranks : (rank + ranks - 1) % ranks;
    const int src = host(rank), dst = host(peer);
    const int spine = spine_of(src, dst, round);
    p.assign({host_up + static_cast<link_id>(src),                              // host to leaf
              leaf_up + static_cast<link_id>((src / hosts) * spines + spine),     // leaf to spine
              spine_down + static_cast<link_id>((dst / hosts) * spines + spine),  // spine to leaf
              host_down + static_cast<link_id>(dst)});                            // leaf to host
  }, flows);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 2 * (ranks - 1);
  const std::string cases = argc > 2 ? argv[2] : "abcdef";
  auto want = [&](char c) { return cases.find(c) != std::string::npos; };

  if (want('a')) {  // every flow over two links of its own: components of one flow
    network net;
    net.reserve(2 * ranks, ranks);
    for (int i = 0; i < 2 * ranks; ++i) (void)net.add_link({host_bytes_per_second, 1e-6});
    report("(a) private links, 4096 flows x 2 links", rounds,
           run(net, rounds, [](int rank, int, std::vector<link_id>& p) {
             p.assign({static_cast<link_id>(2 * rank), static_cast<link_id>(2 * rank + 1)});
           }));
  }
  // ECMP: the spine hashed from (source, destination, round). Collisions put up to ~8
  // flows on a spine link, and the flows of a round end at several distinct times (a
  // batch each).
  auto hashed = [](int src, int dst, int round) {
    return static_cast<int>(mix(static_cast<std::uint32_t>(src * 131071 + dst * 8191 + round)) % spines);
  };
  if (want('b'))
    report("(b) fat tree 1:1, ECMP hash, 4096 x 4 links", rounds, fat_tree(rounds, 2 * host_bytes_per_second, hashed));
  if (want('c'))
    report("(c) fat tree 2:1, ECMP hash, 4096 x 4 links", rounds, fat_tree(rounds, host_bytes_per_second, hashed));
  // Two flows on every spine link, each at half a host's rate: every flow at one rate, so
  // a round is one batch (the ring step the simulator is built around).
  if (want('d'))
    report("(d) fat tree 2:1, 2 flows a spine link", rounds,
           fat_tree(rounds, host_bytes_per_second, [](int src, int, int) { return (src % hosts) % spines; }));
  if (want('e')) {  // one flow at a time: 4096 in progress on links of their own, all of
                    // different sizes, each replaced as it ends (events that batch nothing)
    network net;
    net.reserve(2 * ranks, ranks);
    for (int i = 0; i < 2 * ranks; ++i) (void)net.add_link({host_bytes_per_second, 1e-6});
    std::vector<int> rank_of;
    auto begin = [&](int rank, double now, int k) {
      const link_id p[] = {static_cast<link_id>(2 * rank), static_cast<link_id>(2 * rank + 1)};
      const flow_id f = net.start(p, step_bytes * (1 + (mix(static_cast<std::uint32_t>(k)) % 1000) / 1000.0), now);
      if (f >= rank_of.size()) rank_of.resize(f + 1);
      rank_of[f] = rank;
    };
    int k = 0;
    for (int r = 0; r < ranks; ++r) begin(r, 0, k++);
    std::vector<flow_id> done;
    const long events = static_cast<long>(rounds) * 64;
    double best = 1e300;
    for (long e = 0; e < events;) {
      const std::clock_t c0 = std::clock();
      const long stop = std::min(events, e + 10000);
      const long n = stop - e;
      for (; e < stop; ++e) {
        const double now = net.next_finish();
        done.clear();
        net.finish_until(now, done);
        for (flow_id f : done) begin(rank_of[f], now, k++);
      }
      best = std::min(best, static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC / n);
    }
    std::printf("%-44s %5ld events: %7.2f us/event\n", "(e) private links, one finish at a time", events, best * 1e6);
  }
  // Both ways round the ring: two flows on every host link tie the spines together, so
  // the whole network is one component, and ~49 distinct finish times a round.
  if (want('f'))
    report("(f) fat tree 1:1, ECMP, both ways: 8192 x 4", rounds,
           fat_tree(rounds, 2 * host_bytes_per_second, hashed, true));
}
