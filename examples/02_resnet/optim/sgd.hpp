// Stochastic gradient descent with momentum, Nesterov momentum and weight decay, computed
// step for step as torch.optim.SGD (PyTorch 1.13) computes it (the rule: sgd_rule.hpp).
#pragma once

#include "nn/tensor.hpp"
#include "optim/sgd_rule.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mimatrix::resnet::optim {

namespace detail {

// The update of n consecutive elements.
template <bool Decay, bool Momentum, bool First, bool Nesterov>
inline void sgd_elements(float* __restrict value, const float* __restrict grad, float* __restrict buf, std::size_t n,
                         sgd_coefficients c) {
  for (std::size_t i = 0; i < n; ++i) {
    // Through locals: the vectorizer then sees plain loads and stores of the restrict arrays.
    float v = value[i], b = 0;  // no momentum: no buffer (buf is null)
    if constexpr (Momentum) b = buf[i];
    sgd_element<Decay, Momentum, First, Nesterov>(v, grad[i], b, c);
    value[i] = v;
    if constexpr (Momentum) buf[i] = b;
  }
}

// Blocks of a fixed 8 elements, then the rest: at -O2, GCC's vectorizer ("very cheap" cost
// model) takes only loops that need no scalar remainder, so the fixed block is the vector
// loop (two SSE or one AVX vector of floats).
template <bool Decay, bool Momentum, bool First, bool Nesterov>
void sgd_update(float* value, const float* grad, float* buf, std::size_t n, sgd_coefficients c) {
  constexpr std::size_t block = 8;
  const auto at = [&](std::size_t i) { return Momentum ? buf + i : buf; };  // buf is null without momentum
  std::size_t i = 0;
  for (; i + block <= n; i += block)
    sgd_elements<Decay, Momentum, First, Nesterov>(value + i, grad + i, at(i), block, c);
  sgd_elements<Decay, Momentum, First, Nesterov>(value + i, grad + i, at(i), n - i, c);
}

}  // namespace detail

/// SGD over a fixed list of parameters: `step(lr)` moves each `value` along its `grad` (which
/// the trainer has already made the global average gradient), keeping one momentum buffer per
/// parameter as PyTorch does. Like PyTorch, the first step starts each buffer as the step's
/// direction itself rather than decaying a zero buffer.
/// @par Thread Safety
/// Not synchronized: one thread steps, and no layer may run on the parameters meanwhile.
/// The parameters must outlive the optimizer.
class sgd {
 public:
  /// Throws std::invalid_argument, as PyTorch's constructor does, for a negative momentum or
  /// weight decay, and for Nesterov momentum without momentum or with dampening; also for a
  /// null or repeated parameter, or one whose grad and value differ in size.
  sgd(std::vector<nn::parameter*> parameters, sgd_settings settings = {})
      : parameters_(std::move(parameters)), settings_(settings) {
    check_settings(settings_);
    check_parameters(parameters_);
    // Allocated now, so a resumed run can write the saved buffers into them before its first step.
    if (settings_.momentum != 0) {
      buffers_.reserve(parameters_.size());
      for (const nn::parameter* p : parameters_) buffers_.emplace_back(p->value.size(), 0.0f);
    }
  }

  /// One update of every parameter with learning rate `lr` (a finite value >= 0; PyTorch
  /// rejects a negative one).
  void step(float lr) {
    check_learning_rate(lr, steps_);
    const bool momentum_on = settings_.momentum != 0;
    const bool first = steps_ == 0;
    const detail::sgd_coefficients c{settings_.weight_decay, settings_.momentum, 1 - settings_.dampening, lr};
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      nn::parameter& p = *parameters_[i];
      float* buf = momentum_on ? buffers_[i].data() : nullptr;
      float* value = p.value.data.data();
      const float* grad = p.grad.data.data();
      detail::with_sgd_flags(settings_.weight_decay != 0, momentum_on, first, settings_.nesterov,
                             [&]<bool Decay, bool Momentum, bool First, bool Nesterov>() {
                               detail::sgd_update<Decay, Momentum, First, Nesterov>(value, grad, buf,
                                                                                    p.value.size(), c);
                             });
    }
    ++steps_;
  }

  [[nodiscard]] const sgd_settings& settings() const noexcept { return settings_; }
  [[nodiscard]] const std::vector<nn::parameter*>& parameters() const noexcept { return parameters_; }

  /// Steps taken (counting those of the run this one resumed). While it is 0 the buffers hold
  /// nothing: the next step starts them.
  [[nodiscard]] std::int64_t steps() const noexcept { return steps_; }

  /// The momentum buffers, one per parameter in the constructor's order, each the parameter's
  /// size; none when momentum is 0. For a checkpoint: save them with `steps()`, and on resume
  /// write them back through the mutable overload, then call `resume_at`.
  [[nodiscard]] std::vector<std::span<const float>> momentum_buffers() const {
    return {buffers_.begin(), buffers_.end()};
  }
  [[nodiscard]] std::vector<std::span<float>> momentum_buffers() { return {buffers_.begin(), buffers_.end()}; }

  /// Continues a saved run: `steps` is its `steps()`; a positive count makes the next step
  /// decay the (restored) buffers instead of starting them afresh.
  void resume_at(std::int64_t steps) {
    if (steps < 0) throw std::invalid_argument("sgd: cannot resume at step " + std::to_string(steps));
    steps_ = steps;
  }

 private:
  std::vector<nn::parameter*> parameters_;
  sgd_settings settings_;
  std::vector<std::vector<float>> buffers_;
  std::int64_t steps_ = 0;
};

}  // namespace mimatrix::resnet::optim
