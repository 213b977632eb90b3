// Tests of transport/simulated/network.hpp: max-min rates and finish times worked out by
// hand, rates that change when flows start and end, batching of equal finishes, carried
// bytes, reused ids, bad arguments, and random networks against a plain reference.
#include "mimatrix/transport/simulated/network.hpp"

#include <gtest/gtest.h>

#include "mimatrix/core/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mimatrix::transport::simulated {
namespace MIMATRIX_UNIT_ID {

constexpr double tight = 1e-9;  // relative: the answers are exact up to rounding

double rel(double expected) { return tight * std::max(1.0, std::abs(expected)); }

// Runs the network to its next finish and returns the flows done then.
std::vector<flow_id> step(network& net, double& now) {
  now = net.next_finish();
  std::vector<flow_id> done;
  net.finish_until(now, done);
  std::sort(done.begin(), done.end());
  return done;
}

TEST(transport_simulated_network, one_flow_alone_takes_bytes_over_bandwidth) {
  network net;
  const link_id a = net.add_link({100, 0});
  const flow_id f = net.start(std::vector<link_id>{a}, 1000, 0);
  EXPECT_EQ(net.active(), 1u);
  EXPECT_NEAR(net.rate(f), 100, rel(100));
  double now = 0;
  EXPECT_EQ(step(net, now), std::vector<flow_id>{f});
  EXPECT_NEAR(now, 10, rel(10));
  EXPECT_EQ(net.active(), 0u);
  EXPECT_EQ(net.next_finish(), std::numeric_limits<double>::infinity());
}

TEST(transport_simulated_network, a_path_runs_at_its_slowest_link) {
  network net;
  const link_id fast = net.add_link({100, 0}), slow = net.add_link({40, 0}), faster = net.add_link({1000, 0});
  const flow_id f = net.start(std::vector<link_id>{fast, slow, faster}, 400, 0);
  EXPECT_NEAR(net.rate(f), 40, rel(40));
  EXPECT_NEAR(net.next_finish(), 10, rel(10));
}

TEST(transport_simulated_network, two_flows_on_one_link_share_it) {
  network net;
  const link_id a = net.add_link({100, 0});
  const std::vector<link_id> path{a};
  const flow_id f = net.start(path, 500, 0), g = net.start(path, 500, 0);
  EXPECT_NEAR(net.rate(f), 50, rel(50));
  EXPECT_NEAR(net.rate(g), 50, rel(50));
  double now = 0;
  EXPECT_EQ(step(net, now), (std::vector<flow_id>{std::min(f, g), std::max(f, g)}));
  EXPECT_NEAR(now, 2 * 500.0 / 100, rel(10));  // 2b/bw
}

// Fails if rates are not recomputed after a finish: g would keep 50 and end at 12.
TEST(transport_simulated_network, the_other_flow_speeds_up_when_one_finishes) {
  network net;
  const link_id a = net.add_link({100, 0});
  const std::vector<link_id> path{a};
  const flow_id f = net.start(path, 200, 0), g = net.start(path, 600, 0);
  double now = 0;
  EXPECT_EQ(step(net, now), std::vector<flow_id>{f});
  EXPECT_NEAR(now, 4, rel(4));  // 200 bytes at 50
  EXPECT_NEAR(net.rate(g), 100, rel(100));
  EXPECT_EQ(step(net, now), std::vector<flow_id>{g});
  EXPECT_NEAR(now, 8, rel(8));  // 200 sent by 4, then 400 at 100
}

// Link A 10, link B 4; flow 1 over A, flow 2 over A and B, flow 3 over B. B splits 2 and
// 2; flow 2's unused share of A goes to flow 1: 8.
TEST(transport_simulated_network, classic_max_min) {
  network net;
  const link_id a = net.add_link({10, 0}), b = net.add_link({4, 0});
  const flow_id f1 = net.start(std::vector<link_id>{a}, 80, 0);
  const flow_id f2 = net.start(std::vector<link_id>{a, b}, 20, 0);
  const flow_id f3 = net.start(std::vector<link_id>{b}, 40, 0);
  EXPECT_NEAR(net.rate(f1), 8, rel(8));
  EXPECT_NEAR(net.rate(f2), 2, rel(2));
  EXPECT_NEAR(net.rate(f3), 2, rel(2));
  // f2 ends at 10 (20 at 2), f1 too (80 at 8); then f3 has 20 left at 4: ends at 15.
  double now = 0;
  EXPECT_EQ(step(net, now), (std::vector<flow_id>{f1, f2}));
  EXPECT_NEAR(now, 10, rel(10));
  EXPECT_NEAR(net.rate(f3), 4, rel(4));
  EXPECT_EQ(step(net, now), std::vector<flow_id>{f3});
  EXPECT_NEAR(now, 15, rel(15));
}

// The classic example again, one flow finishing first. When slow f3 (2) ends, f2 is held
// by its own B (4) and f1 takes the rest of A (6): a change at a low rate reaches the fast
// flows. When fast f1 (8) ends instead, f2 and f3 keep 2: B still holds them.
TEST(transport_simulated_network, classic_max_min_after_one_finish) {
  for (const bool slow_first : {true, false}) {
    SCOPED_TRACE(slow_first ? "f3 first" : "f1 first");
    network net;
    const link_id a = net.add_link({10, 0}), b = net.add_link({4, 0});
    const flow_id f1 = net.start(std::vector<link_id>{a}, slow_first ? 80 : 8, 0);
    const flow_id f2 = net.start(std::vector<link_id>{a, b}, 20, 0);
    const flow_id f3 = net.start(std::vector<link_id>{b}, slow_first ? 2 : 40, 0);
    double now = 0;
    EXPECT_EQ(step(net, now), std::vector<flow_id>{slow_first ? f3 : f1});
    EXPECT_NEAR(now, 1, rel(1));
    if (slow_first) {
      EXPECT_NEAR(net.rate(f1), 6, rel(6));
      EXPECT_NEAR(net.rate(f2), 4, rel(4));
    } else {
      EXPECT_NEAR(net.rate(f2), 2, rel(2));
      EXPECT_NEAR(net.rate(f3), 2, rel(2));
    }
  }
}

// A flow's private link (here H, 3) caps it below its share of A, and the rest of A goes
// to the flow that A shares with B: f1 = 3, f2 = f3 = 2 (B), f4 = 10 - 3 - 2 = 5.
TEST(transport_simulated_network, a_private_link_caps_a_flow_and_frees_the_rest) {
  network net;
  const link_id a = net.add_link({10, 0}), b = net.add_link({4, 0}), h = net.add_link({3, 0});
  const flow_id f1 = net.start(std::vector<link_id>{h, a}, 30, 0);
  const flow_id f2 = net.start(std::vector<link_id>{a, b}, 30, 0);
  const flow_id f3 = net.start(std::vector<link_id>{b}, 30, 0);
  const flow_id f4 = net.start(std::vector<link_id>{a}, 30, 0);
  EXPECT_NEAR(net.rate(f1), 3, rel(3));
  EXPECT_NEAR(net.rate(f2), 2, rel(2));
  EXPECT_NEAR(net.rate(f3), 2, rel(2));
  EXPECT_NEAR(net.rate(f4), 5, rel(5));
}

// A cap below every share: f1 gets 1 from its own link, f2 the other 9 of A.
TEST(transport_simulated_network, a_cap_below_every_share) {
  network net;
  const link_id a = net.add_link({10, 0}), h = net.add_link({1, 0});
  const flow_id f1 = net.start(std::vector<link_id>{a, h}, 10, 0);
  const flow_id f2 = net.start(std::vector<link_id>{a}, 10, 0);
  EXPECT_NEAR(net.rate(f1), 1, rel(1));
  EXPECT_NEAR(net.rate(f2), 9, rel(9));
}

TEST(transport_simulated_network, a_flow_starting_midway_takes_half) {
  network net;
  const link_id a = net.add_link({100, 0});
  const std::vector<link_id> path{a};
  const flow_id f = net.start(path, 1000, 0);
  EXPECT_NEAR(net.next_finish(), 10, rel(10));
  const flow_id g = net.start(path, 400, 2);  // f has 800 left
  EXPECT_NEAR(net.rate(f), 50, rel(50));
  double now = 0;
  EXPECT_EQ(step(net, now), std::vector<flow_id>{g});
  EXPECT_NEAR(now, 10, rel(10));  // 400 at 50 from 2
  EXPECT_EQ(step(net, now), std::vector<flow_id>{f});
  EXPECT_NEAR(now, 14, rel(14));  // 800 - 400 left at 10, then at 100
}

// Starts at two later times with no next_finish() between: each start must first settle
// the time before it at the old rates.
TEST(transport_simulated_network, starts_at_two_times_without_looking_between) {
  network net;
  const link_id a = net.add_link({100, 0});
  const std::vector<link_id> path{a};
  const flow_id f = net.start(path, 1000, 0);
  const flow_id g = net.start(path, 1000, 2);  // f: 800 left
  const flow_id h = net.start(path, 100, 4);   // f: 700, g: 900 (50 each from 2 to 4)
  double now = 0;
  EXPECT_EQ(step(net, now), std::vector<flow_id>{h});
  EXPECT_NEAR(now, 7, rel(7));  // 100 at 100/3
  EXPECT_EQ(step(net, now), std::vector<flow_id>{f});
  EXPECT_NEAR(now, 7 + 600 / 50.0, rel(19));  // f: 600 left at 7, then 50
  EXPECT_EQ(step(net, now), std::vector<flow_id>{g});
  EXPECT_NEAR(now, 19 + 200 / 100.0, rel(21));  // g: 800 - 600 = 200 left at 19
}

TEST(transport_simulated_network, finish_until_before_the_next_finish_only_moves_time) {
  network net;
  const link_id a = net.add_link({100, 0});
  (void)net.start(std::vector<link_id>{a}, 1000, 0);
  std::vector<flow_id> done;
  net.finish_until(4, done);
  EXPECT_TRUE(done.empty());
  EXPECT_EQ(net.now(), 4);
  EXPECT_NEAR(net.carried(a), 400, rel(400));
  EXPECT_NEAR(net.next_finish(), 10, rel(10));
}

TEST(transport_simulated_network, path_latency_sums_the_links) {
  network net;
  const link_id a = net.add_link({1e9, 1e-6}), b = net.add_link({1e9, 2.5e-6}), c = net.add_link({1e9, 0});
  EXPECT_NEAR(net.path_latency(std::vector<link_id>{a, b, c}), 3.5e-6, 1e-18);
  EXPECT_EQ(net.path_latency(std::vector<link_id>{}), 0);
  EXPECT_EQ(net.links(), 3u);
  EXPECT_EQ(net.link(b).latency, 2.5e-6);
  EXPECT_EQ(net.link(b).bytes_per_second, 1e9);
}

// Finish times a rounding apart finish together; a real difference does not.
TEST(transport_simulated_network, finishes_a_rounding_apart_are_one_batch) {
  network net;
  std::vector<link_id> l;
  for (int i = 0; i < 3; ++i) l.push_back(net.add_link({3e9, 0}));
  const flow_id f = net.start(std::vector<link_id>{l[0]}, 1e6, 0);
  const flow_id g = net.start(std::vector<link_id>{l[1]}, 1e6 * (1 + 1e-12), 0);
  const flow_id h = net.start(std::vector<link_id>{l[2]}, 1e6 * (1 + 1e-6), 0);
  double now = 0;
  EXPECT_EQ(step(net, now), (std::vector<flow_id>{f, g}));
  EXPECT_EQ(step(net, now), std::vector<flow_id>{h});
}

// A ring of 4096 links, each flow over two neighbours: every link has two flows and every
// flow the same rate, whatever order the filling meets them in, so all finish at once.
TEST(transport_simulated_network, a_ring_of_4096_finishes_in_one_batch) {
  constexpr int n = 4096;
  network net;
  for (int i = 0; i < n; ++i) (void)net.add_link({12.5e9 / 3, 1e-6});
  double now = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < n; ++i)
      (void)net.start(std::vector<link_id>{static_cast<link_id>(i), static_cast<link_id>((i + 1) % n)}, 1e6 / 3, now);
    const double start = now;
    const auto done = step(net, now);
    EXPECT_EQ(done.size(), static_cast<std::size_t>(n));
    EXPECT_NEAR(now - start, (1e6 / 3) / (12.5e9 / 6), 1e-12);
    EXPECT_EQ(net.active(), 0u);
  }
}

// Hundreds due at once take finish_until's one-pass path, among entries left stale by
// rate changes at the same time: A (own links) end at 2; B slow down at 1 when C joins
// them, so their old finish times (2) are due but stale, and they end at 3; C at 12.
TEST(transport_simulated_network, many_due_at_once_among_stale_finish_times) {
  constexpr int n = 300;
  network net;
  std::vector<flow_id> a, b, c;
  for (int i = 0; i < n; ++i) a.push_back(net.start(std::vector<link_id>{net.add_link({100, 0})}, 200, 0));
  std::vector<link_id> shared;
  for (int i = 0; i < n; ++i) {
    shared.push_back(net.add_link({100, 0}));
    b.push_back(net.start(std::vector<link_id>{shared.back()}, 200, 0));
  }
  EXPECT_NEAR(net.next_finish(), 2, rel(2));
  for (int i = 0; i < n; ++i) c.push_back(net.start(std::vector<link_id>{shared[i]}, 1000, 1));
  double now = 0;
  for (const auto& [expected, at] : {std::pair{a, 2.0}, std::pair{b, 3.0}, std::pair{c, 12.0}}) {
    auto sorted = expected;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(step(net, now), sorted);
    EXPECT_NEAR(now, at, rel(at));
  }
  EXPECT_EQ(net.active(), 0u);
  EXPECT_NEAR(net.carried(shared[7]), 1200, rel(1200));
}

TEST(transport_simulated_network, carried_counts_bytes_on_every_link_of_a_path) {
  network net;
  const link_id a = net.add_link({100, 0}), b = net.add_link({100, 0});
  const flow_id f = net.start(std::vector<link_id>{a, b}, 300, 0);
  const flow_id g = net.start(std::vector<link_id>{b}, 100, 0);
  std::vector<flow_id> done;
  net.finish_until(1, done);  // both at 50 on b
  EXPECT_NEAR(net.carried(a), 50, rel(50));
  EXPECT_NEAR(net.carried(b), 100, rel(100));
  double now = 0;
  EXPECT_EQ(step(net, now), std::vector<flow_id>{g});  // at 2
  EXPECT_NEAR(net.carried(a), 100, rel(100));
  EXPECT_NEAR(net.carried(b), 200, rel(200));
  EXPECT_EQ(step(net, now), std::vector<flow_id>{f});  // 200 left at 100: at 4
  EXPECT_NEAR(now, 4, rel(4));
  EXPECT_NEAR(net.carried(a), 300, rel(300));
  EXPECT_NEAR(net.carried(b), 400, rel(400));
}

// A link named twice carries the flow twice: the flow gets half of it.
TEST(transport_simulated_network, a_link_named_twice_counts_twice) {
  network net;
  const link_id a = net.add_link({100, 0}), b = net.add_link({100, 0});
  const flow_id f = net.start(std::vector<link_id>{a, b, a}, 100, 0);
  EXPECT_NEAR(net.rate(f), 50, rel(50));
  double now = 0;
  EXPECT_EQ(step(net, now), std::vector<flow_id>{f});
  EXPECT_NEAR(now, 2, rel(2));
  EXPECT_NEAR(net.carried(a), 200, rel(200));
  EXPECT_NEAR(net.carried(b), 100, rel(100));
}

TEST(transport_simulated_network, finished_ids_are_reused) {
  network net;
  const link_id a = net.add_link({100, 0}), b = net.add_link({100, 0});
  const flow_id f = net.start(std::vector<link_id>{a}, 100, 0);
  const flow_id g = net.start(std::vector<link_id>{b}, 200, 0);
  EXPECT_NE(f, g);
  double now = 0;
  EXPECT_EQ(step(net, now), std::vector<flow_id>{f});
  EXPECT_EQ(net.rate(f), 0);  // finished
  const flow_id h = net.start(std::vector<link_id>{a, b, a, b}, 100, now);  // a longer path in f's id
  EXPECT_EQ(h, f);
  EXPECT_NEAR(net.rate(h), 100.0 / 3, rel(100.0 / 3));  // b: 1 share of g, 2 of h; a: 2 of h
  // Many rounds never need more ids than flows at once.
  std::set<flow_id> seen;
  for (int round = 0; round < 1000; ++round) {
    while (net.active() > 0) (void)step(net, now);
    for (int k = 0; k < 3; ++k) seen.insert(net.start(std::vector<link_id>{static_cast<link_id>(k % 2)}, 10, now));
  }
  EXPECT_LE(seen.size(), 3u);
}

TEST(transport_simulated_network, bad_arguments_throw_invalid_argument) {
  network net;
  const link_id a = net.add_link({100, 0});
  auto invalid = [](auto&& call) {
    try {
      call();
    } catch (const error& e) {
      return e.code() == errc::invalid_argument;
    }
    return false;
  };
  EXPECT_TRUE(invalid([&] { (void)net.add_link({0, 0}); }));
  EXPECT_TRUE(invalid([&] { (void)net.add_link({1, -1}); }));
  EXPECT_TRUE(invalid([&] { (void)net.start(std::vector<link_id>{}, 1, 0); }));
  EXPECT_TRUE(invalid([&] { (void)net.start(std::vector<link_id>{a}, 0, 0); }));
  EXPECT_TRUE(invalid([&] { (void)net.start(std::vector<link_id>{a + 1}, 1, 0); }));
  EXPECT_TRUE(invalid([&] { (void)net.link(7); }));
  (void)net.start(std::vector<link_id>{a}, 1, 5);
  EXPECT_TRUE(invalid([&] { (void)net.start(std::vector<link_id>{a}, 1, 4); }));  // time went back
  EXPECT_EQ(net.active(), 1u);
}

// ---- random networks against a reference ----------------------------------------------

// Fresh each run, or MIMATRIX_SEED, as support/grid.hpp's run_seed() (not included, so
// that this file builds with the library's include path alone).
std::uint64_t run_seed() {
  if (const char* s = std::getenv("MIMATRIX_SEED")) return std::strtoull(s, nullptr, 10);
  return (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
}

// Textbook progressive filling over every flow, no shortcuts.
std::map<flow_id, double> reference_rates(const std::vector<double>& capacity,
                                          const std::map<flow_id, std::vector<link_id>>& paths) {
  std::vector<double> left = capacity;
  std::vector<int> unfrozen(capacity.size(), 0);
  for (const auto& [f, p] : paths)
    for (link_id l : p) ++unfrozen[l];
  std::map<flow_id, double> rate;
  while (rate.size() < paths.size()) {
    std::size_t best = capacity.size();
    for (std::size_t l = 0; l < capacity.size(); ++l)
      if (unfrozen[l] > 0 && (best == capacity.size() || left[l] / unfrozen[l] < left[best] / unfrozen[best])) best = l;
    const double share = left[best] / unfrozen[best];
    for (const auto& [f, p] : paths)
      if (!rate.count(f) && std::find(p.begin(), p.end(), best) != p.end()) {
        rate[f] = share;
        for (link_id l : p) {
          left[l] -= share;
          --unfrozen[l];
        }
      }
  }
  return rate;
}

// Random starts at random times between finishes, over `max_links` links or fewer with
// capacities that tie on purpose: rates, finish times, finished sets and carried bytes
// match a plain simulation that recomputes everything every time.
void match_the_reference(int trials, int max_links, int max_starts, int events) {
  const std::uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (MIMATRIX_SEED=" + std::to_string(seed) + " replays it)");
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < trials; ++trial) {
    network net;
    const int links = std::uniform_int_distribution<>(1, max_links)(rng);
    std::vector<double> capacity;
    for (int i = 0; i < links; ++i) {
      capacity.push_back(std::uniform_int_distribution<>(1, 4)(rng) * 25.0);
      (void)net.add_link({capacity.back(), 0});
    }
    std::map<flow_id, std::vector<link_id>> paths;
    std::map<flow_id, double> remaining;
    std::vector<double> carried(links, 0);
    double now = 0;
    for (int event = 0; event < events; ++event) {
      const double next = net.next_finish();
      if (paths.empty() || std::uniform_int_distribution<>(0, 2)(rng) == 0) {
        // Start some flows, now or at some time before the next finish.
        const double at = paths.empty() ? now : now + std::uniform_real_distribution<>(0, 1)(rng) * (next - now);
        auto rates = reference_rates(capacity, paths);
        for (auto& [f, r] : remaining) r -= rates[f] * (at - now);
        for (const auto& [f, p] : paths)
          for (link_id l : p) carried[l] += rates[f] * (at - now);
        now = at;
        for (int k = std::uniform_int_distribution<>(1, max_starts)(rng); k > 0; --k) {
          std::vector<link_id> p;
          for (int h = std::uniform_int_distribution<>(1, 4)(rng); h > 0; --h)
            p.push_back(static_cast<link_id>(std::uniform_int_distribution<>(0, links - 1)(rng)));
          const double bytes = std::uniform_int_distribution<>(1, 8)(rng) * 100.0;
          const flow_id f = net.start(p, bytes, now);
          ASSERT_EQ(paths.count(f), 0u);
          paths[f] = p;
          remaining[f] = bytes;
        }
        const auto expected = reference_rates(capacity, paths);
        for (const auto& [f, r] : expected) ASSERT_NEAR(net.rate(f), r, 1e-9 * r) << "flow " << f;
        continue;
      }
      // Finish: the reference's earliest finish, and who finishes then.
      const auto rates = reference_rates(capacity, paths);
      double at = std::numeric_limits<double>::infinity();
      for (const auto& [f, r] : remaining) at = std::min(at, now + r / rates.at(f));
      ASSERT_NEAR(next, at, 1e-9 * at);
      at = next;  // one clock from here, so that later start times agree
      std::vector<flow_id> expected_done;
      for (auto& [f, r] : remaining) {
        const double sent = std::min(r, rates.at(f) * (at - now));
        for (link_id l : paths[f]) carried[l] += sent;
        r -= sent;
        if (r <= rates.at(f) * 1e-9 * at) expected_done.push_back(f);  // the batching tolerance
      }
      now = at;
      std::vector<flow_id> done;
      net.finish_until(next, done);
      std::sort(done.begin(), done.end());
      ASSERT_EQ(done, expected_done);
      for (flow_id f : done) {
        for (link_id l : paths[f]) carried[l] += remaining[f];
        paths.erase(f);
        remaining.erase(f);
      }
      ASSERT_EQ(net.active(), paths.size());
      for (int l = 0; l < links; ++l)
        ASSERT_NEAR(net.carried(static_cast<link_id>(l)), carried[l], 1e-9 * std::max(1.0, carried[l])) << "link " << l;
    }
  }
}

TEST(transport_simulated_network, small_random_networks_match_the_reference) { match_the_reference(40, 12, 3, 60); }

// More links and flows: components that split and merge, more links of a flow's own.
TEST(transport_simulated_network, larger_random_networks_match_the_reference) { match_the_reference(4, 80, 12, 150); }

}  // namespace
}  // namespace mimatrix::transport::simulated
