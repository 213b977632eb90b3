// What the job server is told: the group it forms, its deadlines, the batch and dataset it
// splits, the rebalancing, the cluster, the state file.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mimatrix::job {

/// @par Thread Safety
/// A plain value.
struct server_settings {
  std::uint16_t port = 0;  // 0: a free port (port() says which)
  /// The address the job port listens on, alone: loopback, where workers look by default;
  /// this host's address for workers elsewhere ("0.0.0.0": every IPv4 address, asked for).
  std::string address = "127.0.0.1";
  std::string secret;
  int expected = 1;  // a generation starts when this many workers have joined...
  int minimum = 1;   // ...or this many, `form_after` after the first one came
  std::chrono::milliseconds form_after{5000};
  std::chrono::milliseconds heartbeat_deadline{2000};  // silent this long: dead
  std::chrono::milliseconds hello_deadline{5000};      // unauthenticated this long: closed
  std::uint64_t samples = 60000;                       // the dataset, split into shards
  std::uint32_t global_batch = 128;                    // B, split by throughput (resnet_train's default)
  /// How often the split is checked against the throughput workers measure (samples a
  /// second of their own compute, in heartbeats): a member whose batch is off its share
  /// by more than `rebalance_tolerance` has the generation re-formed. 0: never.
  std::chrono::milliseconds rebalance_every{0};
  double rebalance_tolerance = 0.15;
  /// ...at this many checks in a row: one noisy measurement of a busy host (a neighbour's
  /// load comes and goes) does not swing every batch back and forth.
  int rebalance_confirmations = 2;
  /// The half-life of the throughput the split follows (throughput_estimate): an on/off
  /// load is balanced at its average. 0: three `rebalance_every` (1 s without checks).
  std::chrono::milliseconds throughput_half_life{0};
  /// The cluster, host by host in order: the switch each hangs off (load_cluster). Ranks
  /// then go switch by switch, host by host in this order, and assignments name each
  /// rank's switch, so workers can build BiGraph or hierarchical topologies. Empty: ranks
  /// by host name, no switches.
  std::vector<std::pair<std::string, std::uint32_t>> cluster;
  bool quiet = false;                                  // no log lines on stderr
  /// Where the server keeps its state (generation, ranks and shards, last completed
  /// step), so that a restarted server takes its workers back; empty: nowhere.
  std::string state_file;
};

}  // namespace mimatrix::job
