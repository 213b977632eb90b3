// One data-parallel training step: forward and loss on this rank's part of the global
// batch, backward with wait-free gradient allreduces (and the classifier's gradient as
// sufficient factors when chosen), then the optimizer on the global mean gradient.
#pragma once

#include "model/resnet.hpp"
#include "nn/softmax_cross_entropy.hpp"
#include "optim/sgd.hpp"
#include "train/step_statistics.hpp"
#include "train/wait_free.hpp"

#include <mimatrix/collectives.hpp>
#include <mimatrix/sufficient_factor.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

namespace mimatrix::resnet::train {

struct data_parallel_settings {
  wait_free_settings wait_free;
  /// Batch-norm statistics over the global batch (SyncBatchNorm): P ranks then compute
  /// exactly what one rank would on the whole batch. Off: each rank's own (as DDP).
  bool synchronized_batch_norm = false;
  /// Send the classifier's weight gradient as sufficient factors (Poseidon) instead of
  /// allreducing it. Needs the same local batch on every rank (its K).
  bool sufficient_factors = false;
};

/// @par Thread Safety
/// One thread; every rank calls step() alike (same global batch, same order).
template <class Transport>
class data_parallel {
 public:
  using collectives_type = mimatrix::collectives<Transport>;

  data_parallel(collectives_type& coll, model::resnet& net, optim::sgd& optimizer, data_parallel_settings settings,
                std::int64_t local_batch)
      : net_(net), optimizer_(optimizer),
        buckets_(coll, settings.wait_free), ranks_(coll.comm().size()) {
    for (nn::batch_norm* bn : net.norms())
      bn->synchronize_with(!(settings.synchronized_batch_norm && ranks_ > 1)
                               ? nn::batch_norm::statistics_reducer{}
                               : [&coll](std::span<double> sums) {
                                   coll.allreduce(sums.data(), sums.data(), sums.size(), dtype::float64,
                                                  reduce::op_kind::sum)
                                       .wait();
                                 });
    if (settings.sufficient_factors && ranks_ > 1) {
      const auto& w = net.head().weight().value;
      factors_.emplace(coll, mimatrix::fully_connected_shape{std::size_t(w.dim(0)), std::size_t(w.dim(1)),
                                                             std::size_t(local_batch)});
    }
  }

  // The network outlives this group: its batch norms must not keep a reducer of it.
  ~data_parallel() {
    for (nn::batch_norm* bn : net_.norms()) bn->synchronize_with({});
  }
  data_parallel(const data_parallel&) = delete;
  data_parallel& operator=(const data_parallel&) = delete;

  /// One step on this rank's samples of a global batch of `global_batch` (the sum of every
  /// rank's). The loss is the global batch's mean, so ranks with more samples weigh more.
  step_statistics step(const nn::tensor& images, std::span<const std::uint8_t> labels, std::uint64_t global_batch,
                       float lr) {
    const auto t0 = std::chrono::steady_clock::now();
    const nn::tensor logits = net_.forward(images, model::phase::train);
    step_statistics s;
    s.samples = logits.dim(0);
    s.loss_sum = loss_.forward(logits, labels) * double(s.samples);
    s.correct = loss_.correct();
    grad_logits_ = loss_.backward();  // mean over this rank's samples: rescale to the global
    const float scale = float(s.samples) / float(global_batch);
    for (float& g : grad_logits_.data) g *= scale;

    mimatrix::sufficient_factor_request factored;
    nn::parameter& head_weight = net_.head().weight();
    net_.backward(grad_logits_, [&](nn::parameter& p) {
      if (ranks_ == 1) return;
      if (factors_ && &p == &head_weight) {
        if (std::int64_t(factors_->shape().batch) != s.samples)
          throw std::invalid_argument("sufficient factors: this rank has " + std::to_string(s.samples) +
                                      " samples, the factors were sized for " +
                                      std::to_string(factors_->shape().batch));
        factored = factors_->start(grad_logits_.data.data(), net_.head().last_input().data.data());
        return;
      }
      buckets_.ready(p);
    });
    if (ranks_ > 1) {
      s.wait_ms = buckets_.finish();
      if (factored.valid()) {
        const auto w0 = std::chrono::steady_clock::now();
        factored.finish(head_weight.grad.data.data());
        s.wait_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count();
      }
    }
    optimizer_.step(lr);
    s.compute_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() - s.wait_ms;
    return s;
  }

  /// How many of these samples the model (in evaluation mode) classifies right.
  std::int64_t correct(const nn::tensor& images, std::span<const std::uint8_t> labels) {
    nn::softmax_cross_entropy eval;
    (void)eval.forward(net_.forward(images, model::phase::eval), labels);
    return eval.correct();
  }

  [[nodiscard]] std::size_t buckets_last_step() const { return buckets_.buckets_last_step(); }
  /// Wait-free (true) or all allreduces after backward, from the next step; same results.
  void set_overlap(bool overlap) { buckets_.set_overlap(overlap); }

 private:
  model::resnet& net_;
  optim::sgd& optimizer_;
  gradient_buckets<collectives_type, host_gradients<nn::parameter>> buckets_;
  int ranks_;
  nn::softmax_cross_entropy loss_;
  nn::tensor grad_logits_;  // kept: sufficient factors read it until finish
  std::optional<mimatrix::sufficient_factor_broadcast<Transport>> factors_;
};

}  // namespace mimatrix::resnet::train
