// Allreduces cut into thousands of small chunks, shared by back_pressure_test (quick tier)
// and back_pressure_grid_test (long tier): every algorithm at the chunk sizes the parent
// names, exact int32 sums in place and out of place, on data fresh from the parent's seed.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "mimatrix/algorithm/gdraa.hpp"
#include "mimatrix/algorithm/halving_doubling.hpp"
#include "mimatrix/algorithm/hdrm.hpp"
#include "mimatrix/algorithm/hierarchical.hpp"
#include "mimatrix/algorithm/recursive_doubling.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "multi_process.hpp"

namespace mimatrix::test {

/// What the parent asks of a run, passed to the ranks in the environment.
struct small_chunks_case {
  std::string chunks;              // "256,512,4096": bytes, the chunk of each pass
  std::size_t count = 0;           // int32 elements a call
  std::string algorithms = "all";  // or one name: "halving_doubling"
  int calls = 1;                   // each in place and out of place
  int timeout_s = 20;              // a call's deadline
  std::uint64_t seed = std::random_device{}();

  std::vector<std::pair<std::string, std::string>> env() const {
    return {{"SMALL_CHUNKS", chunks},
            {"SMALL_CHUNKS_COUNT", std::to_string(count)},
            {"SMALL_CHUNKS_ALGORITHMS", algorithms},
            {"SMALL_CHUNKS_CALLS", std::to_string(calls)},
            {"SMALL_CHUNKS_TIMEOUT_S", std::to_string(timeout_s)},
            {"SMALL_CHUNKS_SEED", std::to_string(seed)}};
  }
};

/// A rank's side of a small_chunks_case: every failure printed with rank, algorithm,
/// chunk, call and element.
class small_chunks_run {
 public:
  small_chunks_run()
      : count_(number("SMALL_CHUNKS_COUNT")),
        calls_(int(number("SMALL_CHUNKS_CALLS"))),
        seed_(number("SMALL_CHUNKS_SEED")),
        only_(text("SMALL_CHUNKS_ALGORITHMS")) {
    comm_.set_timeout(std::chrono::seconds(number("SMALL_CHUNKS_TIMEOUT_S")));
  }

  /// Every algorithm asked for at each chunk; 0 when every sum was exact.
  int run() {
    const int p = comm_.size();
    for (const std::size_t chunk : chunk_list()) {
      const algorithm::policy tuning{chunk};
      // A permutation of the ranks alike on every rank, new each run: who pairs with whom.
      std::vector<int> order(static_cast<std::size_t>(p));
      for (int k = 0; k < p; ++k) order[std::size_t(k)] = k;
      std::shuffle(order.begin(), order.end(), std::mt19937_64(seed_ + chunk));
      check("ring", chunk, topology::ring{}, algorithm::ring(tuning));
      check("halving_doubling", chunk, topology::ring{}, algorithm::halving_doubling(order, tuning));
      check("hdrm", chunk, topology::bigraph{}, algorithm::hdrm(tuning));
      using nodes = topology::hierarchical<topology::ring, topology::ring>;
      check("hierarchical", chunk, nodes(p % 2 ? 1 : 2),
            algorithm::hierarchical<algorithm::ring, algorithm::ring>(algorithm::ring(tuning), algorithm::ring(tuning)));
    }
    // Never chunked by a policy: once a run.
    check("recursive_doubling", 0, topology::ring{}, algorithm::recursive_doubling{});
    check("gdraa", 0, topology::mesh{}, algorithm::gdraa{});
    if (failures_ == 0)
      std::printf("rank %d: small chunks exact over %s\n", comm_.rank(), comm_.transport().provider().c_str());
    return failures_ == 0 ? 0 : 1;
  }

 private:
  template <class Topology, class Algorithm>
  void check(const char* name, std::size_t chunk, const Topology& topo, const Algorithm& algo) {
    if (only_ != "all" && only_ != name) return;
    allreduce<transport::fabric, Topology, reduce::sum<std::int32_t>, Algorithm> sum(comm_, topo, algo);
    const int p = comm_.size();
    std::vector<std::int32_t> in(count_), out(count_), want(count_);
    for (int call = 0; call < calls_; ++call) {
      const std::uint64_t salt = seed_ ^ (chunk << 20) ^ std::uint64_t(call);
      for (std::size_t i = 0; i < count_; ++i) {
        in[i] = value(salt, comm_.rank(), i);
        want[i] = 0;
        for (int r = 0; r < p; ++r) want[i] += value(salt, r, i);
      }
      try {
        sum(in, out);
        compare(out, want, name, chunk, call, "out of place");
        sum(in);
        compare(in, want, name, chunk, call, "in place");
      } catch (const error& e) {
        std::printf("rank %d: %s, chunk %zu, call %d: %s\n", comm_.rank(), name, chunk, call, e.what());
        ++failures_;
        return;
      }
    }
  }

  void compare(const std::vector<std::int32_t>& got, const std::vector<std::int32_t>& want, const char* name,
               std::size_t chunk, int call, const char* where) {
    const auto bad = std::mismatch(got.begin(), got.end(), want.begin());
    if (bad.first == got.end()) return;
    const auto i = std::size_t(bad.first - got.begin());
    std::printf("rank %d: %s, chunk %zu, call %d, %s: element %zu is %d, expected %d (seed %llu)\n", comm_.rank(), name,
                chunk, call, where, i, got[i], want[i], static_cast<unsigned long long>(seed_));
    ++failures_;
  }

  /// Rank r's element i: below 2^20, so sums of a few ranks are exact in int32.
  static std::int32_t value(std::uint64_t salt, int r, std::size_t i) {
    std::uint64_t x = salt + 0x9e3779b97f4a7c15ull * (i + 1) + 0xbf58476d1ce4e5b9ull * std::uint64_t(r + 1);
    x = (x ^ (x >> 31)) * 0x94d049bb133111ebull;
    return std::int32_t((x ^ (x >> 29)) & 0xfffff);
  }

  std::vector<std::size_t> chunk_list() const {
    std::vector<std::size_t> out;
    const std::string all = text("SMALL_CHUNKS");
    for (std::size_t at = 0; at < all.size();) {
      const std::size_t comma = std::min(all.find(',', at), all.size());
      out.push_back(std::stoull(all.substr(at, comma - at)));
      at = comma + 1;
    }
    return out;
  }
  static std::string text(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
  }
  static std::uint64_t number(const char* name) { return std::stoull(text(name)); }

  communicator<transport::fabric> comm_;
  std::size_t count_;
  int calls_;
  std::uint64_t seed_;
  std::string only_;
  int failures_ = 0;
};

/// Runs `c` as `scenario` (a small_chunks_run) on `ranks` ranks over `provider`, within
/// `limit`; every rank must say it was exact.
inline void expect_small_chunks_exact(const small_chunks_case& c, int ranks, const std::string& provider,
                                      const std::string& scenario, std::chrono::seconds limit) {
  SCOPED_TRACE(provider + ", " + std::to_string(ranks) + " ranks, chunks " + c.chunks + ", count " +
               std::to_string(c.count) + ", seed " + std::to_string(c.seed));
  const auto r = run_ranks(ranks, provider, scenario, c.env(), limit);
  ASSERT_FALSE(r.timed_out) << all_output(r);
  EXPECT_EQ(r.exit_code, 0) << all_output(r);
  for (const auto& out : r.output)
    EXPECT_NE(out.find("small chunks exact over " + provider), std::string::npos) << all_output(r);
}

}  // namespace mimatrix::test
