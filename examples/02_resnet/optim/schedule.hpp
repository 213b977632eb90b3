// Learning rate by optimizer step: the linear scaling rule, PyTorch's OneCycleLR, and
// Goyal-style linear warm-up followed by cosine, step or constant rates.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace mimatrix::resnet::optim {

/// The linear scaling rule (Goyal et al. 2017, "Accurate, Large Minibatch SGD"): a learning
/// rate tuned at `reference_batch` scales with the global batch, base_lr * global / reference.
inline double linear_scaled_lr(double base_lr, std::int64_t global_batch, std::int64_t reference_batch) {
  if (global_batch <= 0 || reference_batch <= 0)
    throw std::invalid_argument("linear_scaled_lr: batches must be positive (global " + std::to_string(global_batch) +
                                ", reference " + std::to_string(reference_batch) + ")");
  return base_lr * static_cast<double>(global_batch) / static_cast<double>(reference_batch);
}

/// OneCycleLR's numbers other than the peak and length; the defaults are PyTorch's.
/// @par Thread Safety
/// A plain value.
struct one_cycle_settings {
  double pct_start = 0.3;
  double div_factor = 25;
  double final_div_factor = 1e4;
};

/// torch.optim.lr_scheduler.OneCycleLR(max_lr, total_steps, pct_start, anneal_strategy='cos',
/// div_factor, final_div_factor, three_phase=False), learning rate only (the trainer does
/// not cycle momentum). `lr(i)` is the rate of the i-th optimizer step, 0-based: the rate
/// PyTorch's scheduler holds after i calls to its step(). In PyTorch 1.13's arithmetic:
///
///   initial = max_lr / div_factor,  min = initial / final_div_factor
///   phase 1: steps [0, e1], e1 = pct_start * total_steps - 1 (a double), initial -> max_lr
///   phase 2: steps (e1, e2], e2 = total_steps - 1,                      max_lr -> min
///   lr(i) = end + (start - end) / 2 * (1 + cos(pi * pct)),  pct = (i - s) / (e - s),
///   s being the phase's start: 0 for phase 1, e1 for phase 2.
///
/// So lr(0) = max_lr / 25, lr(total_steps - 1) = max_lr / 25 / 1e4, and the peak is at the
/// last step <= e1 (not exactly max_lr unless e1 is a whole number). Steps up to total_steps
/// are answered (PyTorch's last scheduler step reaches it); later ones throw, as PyTorch does.
/// @par Thread Safety
/// Immutable after construction; any number of threads may call lr().
class one_cycle {
 public:
  one_cycle(double max_lr, std::int64_t total_steps, one_cycle_settings settings = {})
      : max_lr_(max_lr), total_steps_(total_steps), settings_(settings) {
    if (total_steps_ <= 0)
      throw std::invalid_argument("one_cycle: total_steps must be positive, not " + std::to_string(total_steps_));
    if (!(settings_.pct_start >= 0 && settings_.pct_start <= 1))
      throw std::invalid_argument("one_cycle: pct_start must be in [0, 1], not " + std::to_string(settings_.pct_start));
    if (!(max_lr_ > 0) || !(settings_.div_factor > 0) || !(settings_.final_div_factor > 0))
      throw std::invalid_argument("one_cycle: max_lr, div_factor and final_div_factor must be positive");
    phase1_end_ = settings_.pct_start * static_cast<double>(total_steps_) - 1;
    // PyTorch divides by the phase lengths; where one is zero and reached, it raises
    // ZeroDivisionError. Refused here at once instead of at that step.
    if (phase1_end_ == 0)
      throw std::invalid_argument("one_cycle: pct_start * total_steps = 1 makes the warm-up phase empty (" +
                                  std::to_string(total_steps_) + " steps)");
    if (static_cast<double>(total_steps_ - 1) == phase1_end_)
      throw std::invalid_argument("one_cycle: pct_start = 1 leaves no annealing phase");
  }

  [[nodiscard]] double initial_lr() const noexcept { return max_lr_ / settings_.div_factor; }
  [[nodiscard]] double min_lr() const noexcept { return initial_lr() / settings_.final_div_factor; }
  [[nodiscard]] double max_lr() const noexcept { return max_lr_; }
  [[nodiscard]] std::int64_t total_steps() const noexcept { return total_steps_; }
  /// The phase boundary e1 above (a double, as in PyTorch).
  [[nodiscard]] double phase1_end() const noexcept { return phase1_end_; }

  [[nodiscard]] double lr(std::int64_t step) const {
    if (step < 0 || step > total_steps_)
      throw std::out_of_range("one_cycle: step " + std::to_string(step) + " is outside [0, " +
                              std::to_string(total_steps_) + "]");
    const auto i = static_cast<double>(step);
    if (i <= phase1_end_) return anneal_cos(initial_lr(), max_lr_, i / phase1_end_);
    const auto e2 = static_cast<double>(total_steps_ - 1);
    return anneal_cos(max_lr_, min_lr(), (i - phase1_end_) / (e2 - phase1_end_));
  }
  [[nodiscard]] double operator()(std::int64_t step) const { return lr(step); }

 private:
  // PyTorch's _annealing_cos: cosine from start (pct 0) to end (pct 1).
  static double anneal_cos(double start, double end, double pct) {
    return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
  }

  double max_lr_;
  std::int64_t total_steps_;
  one_cycle_settings settings_;
  double phase1_end_ = 0;
};

/// Goyal et al.'s gradual warm-up: over the first `steps` steps the rate rises linearly from
/// `start_factor * peak` to `peak` (factor(i) = start_factor + (1 - start_factor) * i / steps),
/// then the schedule it belongs to takes over. Goyal's start is peak / k for a batch k times
/// the reference, i.e. start_factor = reference_batch / global_batch.
/// @par Thread Safety
/// A plain value.
struct warmup {
  std::int64_t steps = 0;
  double start_factor = 0;

  [[nodiscard]] double factor(std::int64_t step) const {
    if (step >= steps) return 1;
    return start_factor + (1 - start_factor) * static_cast<double>(step) / static_cast<double>(steps);
  }
  void check(const char* who) const {
    if (steps < 0) throw std::invalid_argument(std::string(who) + ": negative warm-up steps " + std::to_string(steps));
    if (!(start_factor >= 0 && start_factor <= 1))
      throw std::invalid_argument(std::string(who) + ": warm-up start_factor must be in [0, 1], not " +
                                  std::to_string(start_factor));
  }
};

/// Warm-up, then cosine decay from `peak` to 0 at `total_steps`:
///   lr(i) = peak * warmup.factor(i)                                    for i < W
///   lr(i) = peak * (1 + cos(pi * (i - W) / (total_steps - W))) / 2     for W <= i < total_steps
///   lr(i) = 0                                                          for i >= total_steps
/// @par Thread Safety
/// Immutable after construction; any number of threads may call lr().
class warmup_cosine {
 public:
  warmup_cosine(double peak, warmup w, std::int64_t total_steps)
      : peak_(peak), warmup_(w), total_steps_(total_steps) {
    warmup_.check("warmup_cosine");
    if (!(peak_ >= 0)) throw std::invalid_argument("warmup_cosine: negative peak " + std::to_string(peak_));
    if (total_steps_ <= warmup_.steps)
      throw std::invalid_argument("warmup_cosine: total_steps " + std::to_string(total_steps_) +
                                  " must exceed the warm-up's " + std::to_string(warmup_.steps));
  }

  [[nodiscard]] double lr(std::int64_t step) const {
    if (step < 0) throw std::out_of_range("warmup_cosine: negative step " + std::to_string(step));
    if (step < warmup_.steps) return peak_ * warmup_.factor(step);
    if (step >= total_steps_) return 0;
    const double pct = static_cast<double>(step - warmup_.steps) / static_cast<double>(total_steps_ - warmup_.steps);
    return peak_ * (1 + std::cos(std::numbers::pi * pct)) / 2;
  }
  [[nodiscard]] double operator()(std::int64_t step) const { return lr(step); }

 private:
  double peak_;
  warmup warmup_;
  std::int64_t total_steps_;
};

/// Warm-up, then `peak` times `gamma` for each milestone passed (PyTorch's MultiStepLR: the
/// rate of step i is multiplied by gamma once for every milestone <= i, a repeated milestone
/// counting twice). With no milestones, warm-up then a constant rate:
///   lr(i) = peak * warmup.factor(i) * gamma^|{m in milestones : m <= i}|
/// @par Thread Safety
/// Immutable after construction; any number of threads may call lr().
class warmup_multistep {
 public:
  warmup_multistep(double peak, warmup w, std::vector<std::int64_t> milestones = {}, double gamma = 0.1)
      : peak_(peak), warmup_(w), milestones_(std::move(milestones)), gamma_(gamma) {
    warmup_.check("warmup_multistep");
    if (!(peak_ >= 0)) throw std::invalid_argument("warmup_multistep: negative peak " + std::to_string(peak_));
    if (!(gamma_ > 0)) throw std::invalid_argument("warmup_multistep: gamma must be positive");
    if (!std::is_sorted(milestones_.begin(), milestones_.end()))
      throw std::invalid_argument("warmup_multistep: milestones must be in increasing order");
  }

  [[nodiscard]] double lr(std::int64_t step) const {
    if (step < 0) throw std::out_of_range("warmup_multistep: negative step " + std::to_string(step));
    const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin();
    return peak_ * warmup_.factor(step) * std::pow(gamma_, static_cast<double>(passed));
  }
  [[nodiscard]] double operator()(std::int64_t step) const { return lr(step); }

 private:
  double peak_;
  warmup warmup_;
  std::vector<std::int64_t> milestones_;
  double gamma_;
};

/// One of the schedules above, chosen at run time (by make_schedule from the trainer's
/// --schedule flag). `lr_schedule(i)` is the rate of optimizer step i.
/// @par Thread Safety
/// Immutable after construction; any number of threads may call it.
class lr_schedule {
 public:
  using variant = std::variant<one_cycle, warmup_cosine, warmup_multistep>;

  lr_schedule(std::string name, variant schedule) : name_(std::move(name)), schedule_(std::move(schedule)) {}

  [[nodiscard]] double operator()(std::int64_t step) const {
    return std::visit([step](const auto& s) { return s.lr(step); }, schedule_);
  }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const variant& get() const noexcept { return schedule_; }

 private:
  std::string name_;
  variant schedule_;
};

/// The schedules the trainer's --schedule flag names, for `epochs` epochs of
/// `steps_per_epoch` steps, W = warmup_epochs * steps_per_epoch warm-up steps rising from
/// `warmup_start_factor * peak`:
///   "onecycle": one_cycle(peak, all steps) with PyTorch's defaults; its first 30% are its
///               warm-up, so warmup_epochs must be 0 (a warm-up cannot be added to it)
///   "cosine":   warm-up, then cosine to 0 at the last step
///   "step":     warm-up, then x0.1 at epoch epochs/2 and again at epoch 3*epochs/4 (rounded
///               down, as whole epochs)
///   "constant": warm-up, then peak
/// Any other name throws std::invalid_argument listing these.
inline lr_schedule make_schedule(std::string_view name, double peak, std::int64_t steps_per_epoch, std::int64_t epochs,
                                 std::int64_t warmup_epochs = 0, double warmup_start_factor = 0) {
  const std::string who = "make_schedule(\"" + std::string(name) + "\")";
  if (steps_per_epoch <= 0 || epochs <= 0)
    throw std::invalid_argument(who + ": steps_per_epoch and epochs must be positive (" +
                                std::to_string(steps_per_epoch) + ", " + std::to_string(epochs) + ")");
  if (warmup_epochs < 0 || warmup_epochs > epochs)
    throw std::invalid_argument(who + ": warmup_epochs " + std::to_string(warmup_epochs) + " is outside [0, " +
                                std::to_string(epochs) + "]");
  const std::int64_t total = steps_per_epoch * epochs;
  const warmup w{warmup_epochs * steps_per_epoch, warmup_start_factor};
  if (name == "onecycle") {
    if (warmup_epochs != 0) throw std::invalid_argument(who + ": onecycle has its own warm-up; set warmup_epochs to 0");
    return {std::string(name), one_cycle(peak, total)};
  }
  if (name == "cosine") return {std::string(name), warmup_cosine(peak, w, total)};
  if (name == "step") {
    std::vector<std::int64_t> milestones{epochs / 2 * steps_per_epoch, epochs * 3 / 4 * steps_per_epoch};
    return {std::string(name), warmup_multistep(peak, w, std::move(milestones), 0.1)};
  }
  if (name == "constant") return {std::string(name), warmup_multistep(peak, w)};
  throw std::invalid_argument("unknown learning rate schedule \"" + std::string(name) +
                              "\" (valid: onecycle, cosine, step, constant)");
}

}  // namespace mimatrix::resnet::optim
