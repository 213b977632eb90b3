// Heterogeneous balancing (the SJSU design): the global batch split over ranks by their
// measured throughput, smoothed and with hysteresis so that a load that comes and goes does
// not swing the batches back and forth. Plain values; the job server owns them.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

namespace mimatrix::job {

/// How the global batch and the dataset split over ranks: b_i = B·s_i/Σs (largest
/// remainders, so the b_i sum to B), and shards in proportion to b_i.
struct split {
  std::vector<std::uint32_t> batch;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> shard;
};

inline split split_by_throughput(const std::vector<double>& speed, std::uint32_t global_batch, std::uint64_t samples) {
  const std::size_t n = speed.size();
  split s;
  s.batch.assign(n, 0);
  s.shard.assign(n, {0, 0});
  if (n == 0) return s;
  double total = 0;
  for (double v : speed) total += v > 0 ? v : 0;
  std::vector<double> exact(n);
  for (std::size_t i = 0; i < n; ++i)
    exact[i] = total > 0 ? global_batch * (speed[i] > 0 ? speed[i] : 0) / total : double(global_batch) / double(n);
  std::uint32_t given = 0;
  for (std::size_t i = 0; i < n; ++i) given += s.batch[i] = std::uint32_t(exact[i]);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return exact[a] - s.batch[a] > exact[b] - s.batch[b];
  });
  for (std::size_t k = 0; given < global_batch; k = (k + 1) % n, ++given) ++s.batch[order[k]];
  // A member far slower than the rest (a late joiner's first guess) still gets a sample a
  // step, from the largest batch: a batch of 0 is no rank's share of the work.
  if (global_batch >= n)
    for (std::size_t i = 0; i < n; ++i)
      if (s.batch[i] == 0) --*std::max_element(s.batch.begin(), s.batch.end()), s.batch[i] = 1;
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t len = global_batch ? samples * s.batch[i] / global_batch : samples / n;
    s.shard[i] = {at, i + 1 == n ? samples : at + len};
    at = s.shard[i].second;
  }
  return s;
}

/// A worker's throughput as the balancing sees it: the mean of its measurements weighted
/// down exponentially with their age (half the weight every `half_life`), so a throttle that
/// switches on and off is seen at its average, while a lasting change is followed within a
/// few half-lives. The first measurement replaces the figure the worker declared in `hello`;
/// a worker that declared none (0) is not known until it is measured (`known`).
/// @par Thread Safety
/// A plain value.
class throughput_estimate {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  explicit throughput_estimate(double declared = 0.0) : value_(declared > 0 ? declared : 0.0) {}

  /// A measurement `measured` (samples a second) taken at `at`; none that is not positive.
  void add(double measured, time_point at, std::chrono::duration<double> half_life) {
    if (!(measured > 0)) return;
    if (!measured_ || half_life.count() <= 0) {
      value_ = measured;
    } else {
      const double age = std::max(0.0, std::chrono::duration<double>(at - last_).count());
      value_ += (1.0 - std::exp2(-age / half_life.count())) * (measured - value_);
    }
    measured_ = true;
    last_ = at;
  }
  /// Samples a second, declared or measured; nothing while neither.
  std::optional<double> known() const { return value_ > 0 ? std::optional<double>(value_) : std::nullopt; }

 private:
  double value_;
  bool measured_ = false;
  time_point last_{};
};

/// The speeds a split takes: each known one as it is, and each unknown one (a worker that
/// joined late and declared nothing) the mean of the known ones, so that it starts at an
/// equal share instead of at one sample a step. All unknown: even shares.
inline std::vector<double> speeds_for_split(const std::vector<std::optional<double>>& known) {
  double sum = 0;
  std::size_t count = 0;
  for (const auto& k : known)
    if (k) sum += *k, ++count;
  const double guess = count ? sum / double(count) : 1.0;
  std::vector<double> speed;
  speed.reserve(known.size());
  for (const auto& k : known) speed.push_back(k ? *k : guess);
  return speed;
}

/// A rank whose local batch is off the share its throughput calls for.
struct share_gap {
  std::size_t rank = 0;
  std::uint32_t have = 0, want = 0;
};

/// The first rank whose batch `have` is more than `tolerance` (relative) off its share of
/// `global_batch` by `speed`; nothing when every batch is within it (the hysteresis band: a
/// smaller change moves no batch).
inline std::optional<share_gap> off_share(const std::vector<std::uint32_t>& have, const std::vector<double>& speed,
                                          std::uint32_t global_batch, double tolerance) {
  const split want = split_by_throughput(speed, global_batch, 0);
  for (std::size_t r = 0; r < have.size() && r < want.batch.size(); ++r) {
    const double ideal = want.batch[r];
    if (ideal > 0 && std::abs(double(have[r]) - ideal) > tolerance * ideal) return share_gap{r, have[r], want.batch[r]};
  }
  return std::nullopt;
}

/// Whether an imbalance seen at a check re-forms the generation: only once it has been
/// seen at `needed` checks in a row (a balanced check starts the count again).
struct imbalance_streak {
  int needed = 1;
  int seen = 0;
  bool confirm(bool imbalanced) {
    seen = imbalanced ? seen + 1 : 0;
    return seen >= std::max(needed, 1);
  }
};

}  // namespace mimatrix::job
