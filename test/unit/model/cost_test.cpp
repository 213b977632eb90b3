#include "mimatrix/model/cost.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using schedule::collective;

// The link of the acceptance test: α = 5 us, 10 GB/s, reductions at 20 GB/s,
// and 1 us for each further message one rank has in flight (GDRAA's p-1 writes).
model::network realistic() {
  model::network net;
  net.link = model::link_model::from_rates(5e-6, 10e9, 20e9);
  net.message_gap = 1e-6;
  net.incast_loss = 0;
  return net;
}

constexpr double small = 8;
constexpr double large = 64.0 * 1024 * 1024;

/// The algorithms that run on one topology, in automatic's candidate order.
struct candidate_set {
  std::string_view topology;
  model::network net;
  std::vector<std::string_view> algorithms;
};

std::vector<candidate_set> candidate_sets() {
  model::network shared = realistic();
  shared.shared_link_flows = 2;  // plain halving-doubling's partners share BiGraph's uplinks
  return {
      {"ring", realistic(), {"ring", "recursive_doubling", "halving_doubling"}},
      {"mesh", realistic(), {"gdraa", "recursive_doubling", "halving_doubling"}},
      {"bigraph", shared, {"hdrm", "halving_doubling", "recursive_doubling", "ring"}},
  };
}

double predicted(std::string_view algorithm, const model::network& net, collective kind, int p, double n) {
  const auto t = model::predict(algorithm, net, kind, p, n);
  EXPECT_TRUE(t.has_value()) << algorithm;
  return t.value_or(1e300);
}

std::string_view winner(const candidate_set& set, collective kind, int p, double n) {
  std::string_view best;
  double best_time = 0;
  for (auto a : set.algorithms) {
    const double t = predicted(a, set.net, kind, p, n);
    if (best.empty() || t < best_time) {
      best = a;
      best_time = t;
    }
  }
  return best;
}

struct crossover {
  std::uint64_t bytes;  // the smallest size at which `to` wins
  std::string_view from, to;
};

/// Where the winner changes between 1 byte and 1 GiB: scanned at four points an octave,
/// each change bisected to the byte.
std::vector<crossover> crossovers(const candidate_set& set, collective kind, int p) {
  std::vector<crossover> found;
  std::uint64_t previous = 1;
  for (int step = 1; step <= 30 * 4; ++step) {
    const auto n = static_cast<std::uint64_t>(std::llround(std::exp2(step / 4.0)));
    if (n <= previous) continue;
    if (winner(set, kind, p, double(n)) != winner(set, kind, p, double(previous))) {
      std::uint64_t lo = previous, hi = n;
      while (hi - lo > 1) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        (winner(set, kind, p, double(mid)) == winner(set, kind, p, double(lo)) ? lo : hi) = mid;
      }
      found.push_back({hi, winner(set, kind, p, double(lo)), winner(set, kind, p, double(hi))});
    }
    previous = n;
  }
  return found;
}

std::string human_bytes(std::uint64_t n) {
  char text[32];
  if (n < 1024) std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(n));
  else if (n < 1024 * 1024) std::snprintf(text, sizeof text, "%.1f KiB", n / 1024.0);
  else std::snprintf(text, sizeof text, "%.2f MiB", n / (1024.0 * 1024));
  return text;
}

bool is_bandwidth_optimal(std::string_view a) {
  return a == "ring" || a == "halving_doubling" || a == "gdraa" || a == "hdrm";
}

TEST(cost, textbook_formulas_for_a_power_of_two) {
  const model::network net = realistic();
  const auto& l = net.link;
  const int p = 16;
  const double n = 1 << 20, f = 15.0 / 16;
  EXPECT_DOUBLE_EQ(model::ring(net, collective::allreduce, p, n), 2 * 15 * l.alpha + 2 * f * n * l.beta + f * n * l.gamma);
  EXPECT_DOUBLE_EQ(model::recursive_doubling(net, collective::allreduce, p, n), 4 * (l.alpha + n * l.beta + n * l.gamma));
  EXPECT_DOUBLE_EQ(model::halving_doubling(net, collective::allreduce, p, n),
                   2 * 4 * l.alpha + 2 * f * n * l.beta + f * n * l.gamma);
  EXPECT_DOUBLE_EQ(model::ring(net, collective::reduce_scatter, p, n), 15 * l.alpha + f * n * (l.beta + l.gamma));
  EXPECT_DOUBLE_EQ(model::ring(net, collective::allgather, p, n), 15 * l.alpha + f * n * l.beta);
  EXPECT_DOUBLE_EQ(model::recursive_doubling(net, collective::broadcast, p, n), 4 * (l.alpha + n * l.beta));

  // GDRAA without gap or incast is the paper's 2α + 2(p-1)/p·nβ + (p-1)/p·nγ.
  model::network ideal = net;
  ideal.message_gap = 0;
  EXPECT_DOUBLE_EQ(model::gdraa(ideal, collective::allreduce, p, n), 2 * l.alpha + 2 * f * n * l.beta + f * n * l.gamma);
  EXPECT_GT(model::gdraa(net, collective::allreduce, p, n), model::gdraa(ideal, collective::allreduce, p, n));
}

TEST(cost, a_group_of_one_costs_nothing_and_every_cost_grows_with_size) {
  const model::network net = realistic();
  for (auto a : model::known_algorithms)
    for (collective kind : {collective::allreduce, collective::reduce_scatter, collective::allgather,
                            collective::broadcast}) {
      EXPECT_EQ(model::predict(a, net, kind, 1, large).value_or(-1), 0.0) << a;
      for (int p : {2, 3, 4, 7, 16, 64}) {
        double last = -1;
        for (double n = 1; n <= large; n *= 4) {
          const double t = model::predict(a, net, kind, p, n).value_or(-1);
          EXPECT_GT(t, last) << a << " " << schedule::to_string(kind) << " p=" << p << " n=" << n;
          last = t;
        }
      }
    }
  EXPECT_FALSE(model::predict("bogus", net, collective::allreduce, 4, 8));
}

TEST(cost, folding_in_a_non_power_of_two_costs_two_more_steps) {
  const model::network net = realistic();
  for (collective kind : {collective::allreduce, collective::reduce_scatter, collective::allgather}) {
    EXPECT_GT(model::recursive_doubling(net, kind, 5, large), model::recursive_doubling(net, kind, 4, large));
    EXPECT_GT(model::halving_doubling(net, kind, 5, large), model::halving_doubling(net, kind, 4, large));
  }
  // So ring overtakes halving-doubling for large messages when p is not a power of two.
  EXPECT_LT(model::ring(net, collective::allreduce, 12, large), model::halving_doubling(net, collective::allreduce, 12, large));
  EXPECT_GT(model::ring(net, collective::allreduce, 16, large), model::halving_doubling(net, collective::allreduce, 16, large));
}

TEST(cost, message_bytes_is_the_whole_vector) {
  EXPECT_EQ(model::message_bytes({collective::allreduce, 4, 10, 4, 0}), 40);
  EXPECT_EQ(model::message_bytes({collective::broadcast, 4, 10, 4, 2}), 40);
  EXPECT_EQ(model::message_bytes({collective::reduce_scatter, 4, 10, 4, 0}), 160);
  EXPECT_EQ(model::message_bytes({collective::allgather, 4, 10, 4, 0}), 160);
}

// The acceptance test: recursive doubling wins at 8 bytes, a bandwidth-optimal
// algorithm at 64 MiB, on every topology's candidates.
TEST(cost, recursive_doubling_wins_small_and_bandwidth_optimal_algorithms_win_large) {
  for (const auto& set : candidate_sets())
    for (int p : {2, 4, 8, 16, 32, 64}) {
      EXPECT_EQ(winner(set, collective::allreduce, p, small), "recursive_doubling") << set.topology << " p=" << p;
      EXPECT_TRUE(is_bandwidth_optimal(winner(set, collective::allreduce, p, large)))
          << set.topology << " p=" << p << ": " << winner(set, collective::allreduce, p, large);
    }
  // And for groups that are not powers of two, the large-message winner still moves
  // the data only about twice.
  for (const auto& set : candidate_sets())
    for (int p : {3, 5, 12, 48})
      EXPECT_TRUE(is_bandwidth_optimal(winner(set, collective::allreduce, p, large))) << set.topology << " p=" << p;
}

TEST(cost, hdrm_beats_plain_halving_doubling_on_bigraph_when_links_are_shared) {
  model::network net = realistic();
  for (int p : {4, 16, 64, 256}) {
    net.shared_link_flows = 1;
    EXPECT_DOUBLE_EQ(model::hdrm(net, collective::allreduce, p, large),
                     *model::predict("halving_doubling", net, collective::allreduce, p, large));
    for (double flows : {2.0, 4.0}) {
      net.shared_link_flows = flows;
      const double plain = *model::predict("halving_doubling", net, collective::allreduce, p, large);
      const double mapped = *model::predict("hdrm", net, collective::allreduce, p, large);
      EXPECT_LT(mapped, plain) << "p=" << p << " flows=" << flows;
      // Only the 2(p-1)/p·nβ term is shared; the reduction is not.
      const double moved = 2.0 * (p - 1) / p * large * net.link.beta;
      EXPECT_NEAR(plain - mapped, (flows - 1) * moved, 1e-9) << "p=" << p << " flows=" << flows;
    }
  }
}

TEST(cost, incast_and_message_gap_erode_gdraa_at_scale) {
  model::network net = realistic();
  EXPECT_LT(model::gdraa(net, collective::allreduce, 8, large), model::halving_doubling(net, collective::allreduce, 8, large));
  // p-1 writes a phase at 1 us each outgrow halving-doubling's 2 lg p start-ups.
  EXPECT_GT(model::gdraa(net, collective::allreduce, 64, large), model::halving_doubling(net, collective::allreduce, 64, large));
  // A lossy switch makes (p-1)-to-1 incast cost bandwidth too.
  net.incast_loss = 0.02;
  EXPECT_GT(model::gdraa(net, collective::allreduce, 8, large), model::halving_doubling(net, collective::allreduce, 8, large));
}

TEST(cost, hierarchical_adds_local_and_inter_node_terms) {
  model::network net = realistic();
  net.ranks_per_node = 8;
  const int p = 64;
  // Local ring reduce-scatter and allgather plus an 8-node ring allreduce of n/8.
  model::network local = net;
  local.link = net.local;
  const double expected = model::ring(local, collective::reduce_scatter, 8, large) +
                          model::ring(net, collective::allreduce, 8, large / 8) +
                          model::ring(local, collective::allgather, 8, large);
  EXPECT_DOUBLE_EQ(*model::hierarchical(net, collective::allreduce, p, large), expected);
  EXPECT_LT(*model::hierarchical(net, collective::allreduce, p, large), model::ring(net, collective::allreduce, p, large));
  // Shared NICs slow the inter-node phase.
  model::network shared = net;
  shared.ranks_per_nic = 8;
  EXPECT_GT(*model::hierarchical(shared, collective::allreduce, p, large), expected);
  // Nodes of 8 cannot hold 60 ranks; a node of one is the flat global algorithm.
  EXPECT_FALSE(model::hierarchical(net, collective::allreduce, 60, large));
  net.ranks_per_node = 1;
  EXPECT_DOUBLE_EQ(*model::hierarchical(net, collective::allreduce, p, large), model::ring(net, collective::allreduce, p, large));
}

// Prints the crossover table that docs/algorithms.md quotes, and checks it is sane:
// latency-bound algorithms first, one switch to a bandwidth-optimal one, never back.
TEST(cost, crossover_sizes_are_printed_and_sane) {
  const model::network net = realistic();
  // Recursive doubling resends the whole vector lg p times, so the larger the group,
  // the earlier it loses to halving-doubling (and to ring, which behaves alike).
  std::uint64_t previous_switch = UINT64_MAX;
  for (int p : {4, 16, 64}) {
    const auto found = crossovers({"", net, {"recursive_doubling", "halving_doubling"}}, collective::allreduce, p);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_LT(found[0].bytes, previous_switch) << "p=" << p;
    previous_switch = found[0].bytes;
  }

  std::printf("allreduce crossovers, alpha = %.3g us, beta = 1/(%.3g GB/s), gamma = 1/(%.3g GB/s), gap = %.3g us\n",
              net.link.alpha * 1e6, 1e-9 / net.link.beta, 1e-9 / net.link.gamma, net.message_gap * 1e6);
  std::printf("%-8s %4s  %s\n", "topology", "p", "winner as the message grows");
  // 12 shows a group that is not a power of two, where folding costs halving-doubling.
  for (const auto& set : candidate_sets()) {
    for (int p : {4, 12, 16, 64}) {
      const auto found = crossovers(set, collective::allreduce, p);
      std::string line = std::string(winner(set, collective::allreduce, p, 1));
      for (const auto& c : found) line += " -> " + std::string(c.to) + " from " + human_bytes(c.bytes);
      std::printf("%-8s %4d  %s\n", std::string(set.topology).c_str(), p, line.c_str());

      ASSERT_FALSE(found.empty()) << set.topology << " p=" << p;
      EXPECT_EQ(found.front().from, "recursive_doubling");
      for (std::size_t i = 0; i < found.size(); ++i) {
        EXPECT_TRUE(is_bandwidth_optimal(found[i].to)) << "no return to a latency-bound algorithm";
        EXPECT_GE(found[i].bytes, 1024u) << set.topology << " p=" << p;
        EXPECT_LE(found[i].bytes, 16u << 20) << set.topology << " p=" << p;
        if (i) {
          EXPECT_GT(found[i].bytes, found[i - 1].bytes);
        }
      }
    }
  }
}

}  // namespace
}  // namespace mimatrix
