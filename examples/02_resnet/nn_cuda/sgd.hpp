// SGD on the GPU: torch.optim.SGD's update (optim/sgd_rule.hpp, the CPU optimizer's rule)
// for every parameter of a network, in one kernel launch a step, queued on the context's
// stream after the gradients' work; nothing waits on the host.
#pragma once

#include "context.hpp"
#include "multi_tensor_sgd.hpp"
#include "tensor.hpp"

#include "optim/sgd_rule.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mimatrix::resnet::nn_cuda {

namespace detail {
// sgd.cu: the update of every slot's chunks (`slots` in device memory).
void launch_sgd(const sgd_slot* slots, int count, std::int64_t chunks, bool decay, bool momentum, bool first,
                bool nesterov, optim::detail::sgd_coefficients c, cudaStream_t stream);
}  // namespace detail

/// As optim::sgd (the same checks, steps and momentum buffers, started by the first step),
/// over parameters in GPU memory.
/// @par Thread Safety
/// As its context: one thread. The parameters and the context must outlive it.
class sgd {
 public:
  sgd(context& ctx, std::vector<parameter*> parameters, optim::sgd_settings settings = {})
      : ctx_(ctx), parameters_(std::move(parameters)), settings_(settings) {
    optim::check_settings(settings_);
    optim::check_parameters(parameters_);
    detail::sgd_plan plan;
    if (settings_.momentum != 0) buffers_.reserve(parameters_.size());
    for (parameter* p : parameters_) {
      float* buf = nullptr;
      if (settings_.momentum != 0) {
        buffers_.emplace_back(p->value.shape());
        buffers_.back().fill_zero(ctx_.stream());  // a resumed run writes its saved ones over
        buf = buffers_.back().data();
      }
      plan.add(p->value.data(), p->grad.data(), buf, static_cast<std::int64_t>(p->value.size()));
    }
    chunks_ = plan.chunks;
    count_ = static_cast<int>(plan.slots.size());
    slots_ = detail::device_buffer(plan.slots.size() * sizeof(detail::sgd_slot));
    if (count_ > 0) {
      MIMATRIX_NN_CUDA_CHECK(cudaMemcpyAsync(slots_.data(), plan.slots.data(), slots_.bytes(), cudaMemcpyHostToDevice,
                                             ctx_.stream()));
      ctx_.synchronize();  // `plan` goes when we return
    }
  }

  /// One update of every parameter with learning rate `lr`, queued on the context's stream.
  void step(float lr) {
    optim::check_learning_rate(lr, steps_);
    if (count_ > 0)
      detail::launch_sgd(static_cast<const detail::sgd_slot*>(slots_.data()), count_, chunks_,
                         settings_.weight_decay != 0, settings_.momentum != 0, steps_ == 0, settings_.nesterov,
                         {settings_.weight_decay, settings_.momentum, 1 - settings_.dampening, lr}, ctx_.stream());
    ++steps_;
  }

  [[nodiscard]] const optim::sgd_settings& settings() const noexcept { return settings_; }
  [[nodiscard]] const std::vector<parameter*>& parameters() const noexcept { return parameters_; }
  [[nodiscard]] std::int64_t steps() const noexcept { return steps_; }
  /// One a parameter, in its shape; none without momentum. A checkpoint saves them.
  [[nodiscard]] std::vector<device_tensor>& momentum_buffers() noexcept { return buffers_; }
  void resume_at(std::int64_t steps) {
    if (steps < 0) throw std::invalid_argument("sgd: cannot resume at step " + std::to_string(steps));
    steps_ = steps;
  }

 private:
  context& ctx_;
  std::vector<parameter*> parameters_;
  optim::sgd_settings settings_;
  std::vector<device_tensor> buffers_;  // never reallocated: the slots point into them
  detail::device_buffer slots_;
  int count_ = 0;
  std::int64_t chunks_ = 0;
  std::int64_t steps_ = 0;
};

}  // namespace mimatrix::resnet::nn_cuda
