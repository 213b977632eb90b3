// Sufficient-factor broadcasting (sufficient_factor.hpp): the rebuilt gradient is the
// allreduced full gradient; Poseidon's rule; ranks that disagree on K fail, never hang.
#include "mimatrix/sufficient_factor.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "mimatrix/transport/inproc.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using transport::inproc;

constexpr fully_connected_shape resnet20_head{64, 10, 32};  // M=64, N=10 (as the brief spells it)
constexpr fully_connected_shape large_head{2048, 1000, 32};
constexpr fully_connected_shape odd_edges{37, 130, 40};  // rows % 4, columns % 64; P·K > 256 at P = 8

/// Fresh data each run; the seed is in every failure message.
std::uint64_t fresh_seed() { return std::random_device{}(); }

struct factors {
  std::vector<float> u;  // M×K column-major
  std::vector<float> v;  // N×K column-major
};

/// Rank `rank`'s factors, seeded by the run's seed and the rank: uniform in [-1, 1), or
/// integers in [-3, 3].
factors make_factors(const fully_connected_shape& s, std::uint64_t seed, int rank, bool integers) {
  std::mt19937_64 gen(seed * 1000003u + std::uint64_t(rank));
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::uniform_int_distribution<int> whole(-3, 3);
  auto draw = [&] { return integers ? float(whole(gen)) : real(gen); };
  factors f{std::vector<float>(s.outputs * s.batch), std::vector<float>(s.inputs * s.batch)};
  for (auto& x : f.u) x = draw();
  for (auto& x : f.v) x = draw();
  return f;
}

/// What a trainer computes without SFB: this rank's dW = U Vᵀ (M×N row-major), in float.
std::vector<float> local_gradient(const fully_connected_shape& s, const factors& f) {
  std::vector<float> dw(s.outputs * s.inputs, 0.0f);
  for (std::size_t k = 0; k < s.batch; ++k)
    for (std::size_t i = 0; i < s.outputs; ++i) {
      const float a = f.u[i + k * s.outputs];
      const float* v = f.v.data() + k * s.inputs;
      float* d = dw.data() + i * s.inputs;
      for (std::size_t j = 0; j < s.inputs; ++j) d[j] += a * v[j];
    }
  return dw;
}

struct comparison {
  std::size_t wrong = 0;
  std::string first;
  double worst = 0;  // the largest |error| / tolerance seen
};

/// Compares SFB's dW with the allreduced local gradients on `p` ranks; what each rank saw.
///
/// Tolerance, per element: 2·γ·Σ_{p,k} |U_p[i,k]|·|V_p[j,k]| with γ = P·K·2^-24, the
/// float-summation bound (Higham, Accuracy and Stability, §3.1) of each side: SFB sums P·K
/// products in blocks, the reference K products and then P partial sums in the ring's order;
/// either is off the exact sum by at most γ times the sum of magnitudes. Relative to that sum
/// this is 2·P·K·2^-24: 3.8e-6 at P·K = 32, 3.1e-5 at 256 — "1e-5 or so". The magnitude sum
/// is bounded above by ‖U_all[i,:]‖·‖V_all[j,:]‖ (Cauchy–Schwarz), which every rank computes
/// from every rank's regenerated factors. Integer factors are checked for equality instead.
std::vector<comparison> compare_with_allreduce(int p, const fully_connected_shape& s, std::uint64_t seed,
                                               bool integers, sufficient_factor_options options = {}) {
  std::vector<comparison> results(p);
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    const factors mine = make_factors(s, seed, r, integers);

    sufficient_factor_broadcast<inproc> sfb(coll, s, options);
    std::vector<float> dw(s.outputs * s.inputs, std::numeric_limits<float>::quiet_NaN());
    sfb(mine.u.data(), mine.v.data(), dw.data());

    std::vector<float> reference = local_gradient(s, mine);
    coll.allreduce(reference.data(), reference.data(), reference.size(), dtype::float32, reduce::op_kind::sum)
        .wait();
    float divisor = 1.0f;
    if (options.average == factor_average::ranks) divisor = float(p);
    if (options.average == factor_average::global_batch) divisor = float(options.global_batch);
    if (divisor != 1.0f)
      for (auto& x : reference) x /= divisor;

    std::vector<double> row_norm(s.outputs, 0.0), column_norm(s.inputs, 0.0);
    for (int q = 0; q < p; ++q) {
      const factors theirs = make_factors(s, seed, q, integers);
      for (std::size_t k = 0; k < s.batch; ++k) {
        for (std::size_t i = 0; i < s.outputs; ++i) row_norm[i] += std::pow(double(theirs.u[i + k * s.outputs]), 2);
        for (std::size_t j = 0; j < s.inputs; ++j) column_norm[j] += std::pow(double(theirs.v[j + k * s.inputs]), 2);
      }
    }
    const double gamma = double(p) * double(s.batch) * std::ldexp(1.0, -24);
    comparison& c = results[r];
    for (std::size_t i = 0; i < s.outputs; ++i)
      for (std::size_t j = 0; j < s.inputs; ++j) {
        const double got = dw[i * s.inputs + j], want = reference[i * s.inputs + j];
        const double tolerance =
            integers ? 0.0 : 2 * gamma * std::sqrt(row_norm[i]) * std::sqrt(column_norm[j]) / divisor;
        const double error = std::abs(got - want);
        if (tolerance > 0) c.worst = std::max(c.worst, error / tolerance);
        if (!(error <= tolerance)) {  // NaN (an element never written) counts as wrong
          if (c.wrong++ == 0)
            c.first = "dw[" + std::to_string(i) + "][" + std::to_string(j) + "] = " + std::to_string(got) +
                      ", allreduce gives " + std::to_string(want) + ", tolerance " + std::to_string(tolerance);
        }
      }
  });
  return results;
}

void expect_match(int p, const fully_connected_shape& s, bool integers, sufficient_factor_options options = {}) {
  const std::uint64_t seed = fresh_seed();
  const auto results = compare_with_allreduce(p, s, seed, integers, options);
  double worst = 0;
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(results[r].wrong, 0u) << "P=" << p << ", " << s.outputs << "x" << s.inputs << ", K=" << s.batch
                                    << ", seed " << seed << ", rank " << r << ": " << results[r].first;
    worst = std::max(worst, results[r].worst);
  }
  if (!integers)
    ::testing::Test::RecordProperty("worst_error_over_tolerance_P" + std::to_string(p), std::to_string(worst));
}

// --- the reconstruction against the allreduced gradient --------------------------------

TEST(sufficient_factor, random_factors_match_the_allreduced_gradient_on_1_to_8_ranks) {
  for (int p : {1, 2, 3, 4, 8}) {
    expect_match(p, resnet20_head, false);
    expect_match(p, odd_edges, false);
  }
}

TEST(sufficient_factor, the_2048x1000_head_at_k32_matches_on_up_to_4_ranks) {
#ifndef MIMATRIX_TEST_SANITIZER_SUBSET
  for (int p : {1, 2, 3, 4}) expect_match(p, large_head, false);
#else  // under a sanitizer the same paths as the smaller shapes, at 4 s a rank count: one
  expect_match(3, large_head, false);
#endif
}

TEST(sufficient_factor, integer_factors_give_exactly_the_allreduced_gradient) {
  // Products are at most 9 and P·K ≤ 320 of them sum to at most 2880 < 2^24: every partial
  // sum is an exact float, so any order gives the same bits.
  for (int p : {1, 2, 3, 4, 8}) {
    expect_match(p, resnet20_head, true);
    expect_match(p, odd_edges, true);
  }
#ifndef MIMATRIX_TEST_SANITIZER_SUBSET
  expect_match(3, large_head, true);
#endif
}

TEST(sufficient_factor, averages_divide_by_the_ranks_or_the_global_batch) {
  sufficient_factor_options by_ranks;
  by_ranks.average = factor_average::ranks;
  sufficient_factor_options by_batch;
  by_batch.average = factor_average::global_batch;
  for (int p : {1, 3, 8}) {
    by_batch.global_batch = std::size_t(p) * odd_edges.batch;
    expect_match(p, odd_edges, true, by_ranks);  // exact sums, one IEEE division each: equal
    expect_match(p, odd_edges, true, by_batch);
    expect_match(p, odd_edges, false, by_ranks);
  }
}

TEST(sufficient_factor, a_batch_of_zero_gives_a_zero_gradient) {
  transport::run_inproc(3, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    sufficient_factor_broadcast<inproc> sfb(coll, {5, 7, 0});
    std::vector<float> dw(35, 1.0f);
    sfb(nullptr, nullptr, dw.data());
    for (float x : dw) ASSERT_EQ(x, 0.0f);
  });
}

// --- non-blocking use ----------------------------------------------------------------

TEST(sufficient_factor, two_layers_in_flight_finish_in_any_order_and_test_polls) {
  const std::uint64_t seed = fresh_seed();
  const fully_connected_shape lower{48, 20, 6}, upper = resnet20_head;
  transport::run_inproc(3, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    sufficient_factor_broadcast<inproc> first(coll, upper), second(coll, lower);
    const factors a = make_factors(upper, seed, r, true), b = make_factors(lower, seed + 1, r, true);
    std::vector<float> dw_a(upper.outputs * upper.inputs), dw_b(lower.outputs * lower.inputs);

    auto pending_a = first.start(a.u.data(), a.v.data());
    auto pending_b = second.start(b.u.data(), b.v.data());
    EXPECT_THROW((void)first.start(a.u.data(), a.v.data()), error);  // one exchange a layer at a time
    while (!pending_b.test()) {
    }
    pending_b.finish(dw_b.data());
    pending_a.finish(dw_a.data());
    EXPECT_FALSE(pending_a.valid());

    std::vector<float> ref_a = local_gradient(upper, a), ref_b = local_gradient(lower, b);
    coll.allreduce(ref_a.data(), ref_a.data(), ref_a.size(), dtype::float32, reduce::op_kind::sum).wait();
    coll.allreduce(ref_b.data(), ref_b.data(), ref_b.size(), dtype::float32, reduce::op_kind::sum).wait();
    EXPECT_EQ(dw_a, ref_a) << "seed " << seed;
    EXPECT_EQ(dw_b, ref_b) << "seed " << seed;

    auto again = first.start(a.u.data(), a.v.data());  // the workspace is free again
    again.finish(dw_a.data());
    EXPECT_EQ(dw_a, ref_a);
  });
}

// --- Poseidon's rule -----------------------------------------------------------------

// ResNet-20's head, 64×10, at K = 128: P·128·74 = 9472·P against 2·640 = 1280. Even one
// rank's factors (9472 floats) outweigh the gradient's 640: it never pays.
static_assert(!sufficient_factors_pay(1, 128, 64, 10));
static_assert(sufficient_factors_pay(2, 1, 2, 2));  // 2·1·4 = 8 ≤ 8: equality pays

TEST(sufficient_factor, the_rule_never_pays_for_resnet20s_head_at_k128) {
  for (int p = 1; p <= 4096; ++p) ASSERT_FALSE(sufficient_factors_pay(p, 128, 64, 10)) << "P=" << p;
}

TEST(sufficient_factor, the_rule_pays_for_the_2048x1000_head_at_k32_up_to_41_ranks) {
  // P·32·3048 = 97 536·P against 2·2048·1000 = 4 096 000.
  const std::size_t gradient = 2 * 2048 * 1000;
  for (int p = 2; p <= 8; ++p) {
    const std::size_t factors = std::size_t(p) * 32 * (2048 + 1000);
    EXPECT_EQ(factors, 97536u * std::size_t(p));
    EXPECT_TRUE(sufficient_factors_pay(p, 32, 2048, 1000)) << "P=" << p << ": " << factors << " <= " << gradient;
  }
  EXPECT_TRUE(sufficient_factors_pay(41, 32, 2048, 1000));   // 3 998 976 ≤ 4 096 000
  EXPECT_FALSE(sufficient_factors_pay(42, 32, 2048, 1000));  // 4 096 512 > 4 096 000
  EXPECT_TRUE(sufficient_factors_pay(41, large_head));
}

TEST(sufficient_factor, the_rule_is_symmetric_in_m_and_n_and_safe_from_overflow) {
  EXPECT_EQ(sufficient_factors_pay(8, 32, 2048, 1000), sufficient_factors_pay(8, 32, 1000, 2048));
  const std::size_t huge = std::size_t(1) << 40;
  EXPECT_TRUE(sufficient_factors_pay(1, 1, huge, huge));    // 2^41 ≤ 2^81: the right side saturates
  EXPECT_FALSE(sufficient_factors_pay(4, huge, 2, 2));      // 2^44·4 > 8
  EXPECT_FALSE(sufficient_factors_pay(2, huge, huge, huge));  // 2^82 > 2^81: both saturate
  EXPECT_FALSE(sufficient_factors_pay(0, 1, 100, 100));
  EXPECT_FALSE(sufficient_factors_pay(-3, 1, 100, 100));
}

// --- disagreeing and bad input ---------------------------------------------------------

struct outcome {
  std::error_code code;
  std::string message;
};

/// Every rank runs one exchange of shape(r) under a 10 s deadline; what each threw.
template <class ShapeOf>
std::vector<std::optional<outcome>> exchange_with(int p, ShapeOf shape_of) {
  std::vector<std::optional<outcome>> results(p);
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    const fully_connected_shape s = shape_of(r);
    const factors f = make_factors(s, 7, r, true);
    std::vector<float> dw(s.outputs * s.inputs, -1.0f);
    sufficient_factor_options options;
    options.call = call_options{.algorithm = {}, .timeout = 10s, .stream = {}, .tag = 0};
    try {
      sufficient_factor_broadcast<inproc> sfb(coll, s, options);
      sfb(f.u.data(), f.v.data(), dw.data());
    } catch (const error& e) {
      results[r] = outcome{e.code(), e.what()};
    }
    for (float x : dw) ASSERT_EQ(x, -1.0f) << "rank " << r << ": dw written after a failure";
  });
  return results;
}

void expect_everyone_failed(const std::vector<std::optional<outcome>>& results,
                            const std::vector<std::string>& fragments) {
  for (std::size_t r = 0; r < results.size(); ++r) {
    ASSERT_TRUE(results[r].has_value()) << "rank " << r << " did not fail";
    EXPECT_EQ(results[r]->code, errc::invalid_argument) << "rank " << r << ": " << results[r]->message;
    EXPECT_NE(results[r]->message.find("rank " + std::to_string(r) + ", sufficient factors: "), std::string::npos)
        << results[r]->message;
    for (const auto& f : fragments)
      EXPECT_NE(results[r]->message.find(f), std::string::npos)
          << "rank " << r << "'s message lacks '" << f << "': " << results[r]->message;
  }
}

TEST(sufficient_factor, a_rank_with_another_k_fails_every_rank_naming_the_shapes) {
  for (int p : {2, 3, 8}) {
    const auto begin = std::chrono::steady_clock::now();
    const auto results = exchange_with(p, [](int r) {
      return fully_connected_shape{64, 10, r == 1 ? std::size_t(16) : std::size_t(32)};
    });
    expect_everyone_failed(results, {"K=16", "K=32", "rank 1 has M=64, N=10, K=16"});
    EXPECT_LT(std::chrono::steady_clock::now() - begin, 5s) << "P=" << p << ": found by the deadline, not at once";
  }
}

TEST(sufficient_factor, shapes_with_equal_counts_still_fail_rather_than_mix_the_factors) {
  // 64·32 = 32·64 and 10·32 = 5·64: both allgathers agree on their counts, and only the
  // exchanged sizes show that rank 2's factors are not this layer's.
  const auto results = exchange_with(3, [](int r) {
    return r == 2 ? fully_connected_shape{32, 5, 64} : fully_connected_shape{64, 10, 32};
  });
  expect_everyone_failed(results, {"rank 2 has M=32, N=5, K=64", "M=64, N=10, K=32"});
}

TEST(sufficient_factor, bad_local_input_is_an_invalid_argument_naming_the_rank) {
  transport::run_inproc(1, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    sufficient_factor_options no_batch;
    no_batch.average = factor_average::global_batch;
    try {
      sufficient_factor_broadcast<inproc> sfb(coll, resnet20_head, no_batch);
      ADD_FAILURE() << "global_batch = 0 accepted";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("rank 0, sufficient factors: "), std::string::npos) << e.what();
    }
    const std::size_t too_many = std::numeric_limits<std::size_t>::max() / 2;
    const fully_connected_shape too_large{too_many, 10, 32};
    EXPECT_THROW((void)sufficient_factor_broadcast<inproc>(coll, too_large), error);

    sufficient_factor_broadcast<inproc> sfb(coll, resnet20_head);
    std::vector<float> v(resnet20_head.inputs * resnet20_head.batch), dw(640);
    try {
      (void)sfb.start(nullptr, v.data());
      ADD_FAILURE() << "a null U accepted";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("u is null"), std::string::npos) << e.what();
    }
    std::vector<float> u(resnet20_head.outputs * resnet20_head.batch);
    auto pending = sfb.start(u.data(), v.data());
    EXPECT_THROW(pending.finish(nullptr), error);
    EXPECT_TRUE(pending.valid());  // still in flight: finish it properly
    pending.finish(dw.data());
    EXPECT_THROW(pending.finish(dw.data()), error);
    std::error_code ec;
    pending.finish(dw.data(), ec);
    EXPECT_EQ(ec, errc::invalid_argument);
  });
}

}  // namespace
}  // namespace mimatrix
