// One data-parallel training step on the GPU: the same model code (basic_resnet) over the GPU
// layers, the gradients allreduced from device memory on a communication stream as backward
// makes them (wait-free backpropagation, device_gradients.hpp), then the one-launch
// optimizer; the host waits only for the loss, once the whole step is queued. The CPU step
// is data_parallel.hpp.
#pragma once

#include "model/basic_resnet.hpp"
#include "model/cuda_layers.hpp"
#include "nn_cuda/scale.hpp"
#include "nn_cuda/sgd.hpp"
#include "nn_cuda/softmax_cross_entropy.hpp"
#include "train/device_gradients.hpp"
#include "train/step_statistics.hpp"
#include "train/wait_free.hpp"

#include <mimatrix/collectives.hpp>
#include <mimatrix/device/port.hpp>

#include <chrono>
#include <cstdint>
#include <span>

namespace mimatrix::resnet::train {

using cuda_resnet = model::basic_resnet<model::cuda_layers>;

/// Local batch norm (each rank's own statistics, as DDP's default) and the classifier's
/// gradient allreduced: synchronized batch norm and sufficient factors are the CPU step's.
/// @par Thread Safety
/// One thread, the context's; every rank calls step() alike.
template <class Transport>
class device_data_parallel {
 public:
  using collectives_type = mimatrix::collectives<Transport>;

  /// `port` is the device's (nn_cuda::collective_port() on a GPU).
  device_data_parallel(collectives_type& coll, nn_cuda::context& ctx, cuda_resnet& net, nn_cuda::sgd& optimizer,
                       wait_free_settings settings, device::port& port)
      : ctx_(ctx), net_(net), optimizer_(optimizer),
        buckets_(coll, settings, device_gradients<nn_cuda::parameter>(port, ctx.stream())),
        ranks_(coll.comm().size()), loss_(ctx), eval_loss_(ctx) {}

  /// One step on this rank's samples of a global batch of `global_batch`; the loss is the
  /// global batch's mean. Queues the whole step, then waits for the loss only (the
  /// forward pass): the backward pass, the allreduces and the optimizer run on.
  step_statistics step(const nn_cuda::device_tensor& images, std::span<const std::uint8_t> labels,
                       std::uint64_t global_batch, float lr) {
    const auto t0 = std::chrono::steady_clock::now();
    const nn_cuda::device_tensor logits = net_.forward(images, model::phase::train);
    step_statistics s;
    s.wait_measured = false;  // finish() only queues; the stream waits, not the host
    s.samples = logits.dim(0);
    loss_.queue_forward(logits, labels);
    nn_cuda::device_tensor grad = loss_.backward();  // mean over this rank's samples: rescale to the global
    nn_cuda::scale(ctx_, grad, float(s.samples) / float(global_batch));
    net_.backward(grad, [&](nn_cuda::parameter& p) {
      if (ranks_ > 1) buckets_.ready(p);
    });
    if (ranks_ > 1) s.wait_ms = buckets_.finish();
    optimizer_.step(lr);
    s.loss_sum = loss_.mean_loss() * double(s.samples);  // the only wait, with the step queued
    s.correct = loss_.correct();
    s.compute_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() - s.wait_ms;
    return s;
  }

  /// How many of these samples the model (in evaluation mode) classifies right.
  std::int64_t correct(const nn_cuda::device_tensor& images, std::span<const std::uint8_t> labels) {
    (void)eval_loss_.forward(net_.forward(images, model::phase::eval), labels);
    return eval_loss_.correct();
  }

  /// Waits for the allreduces still in flight on the stream (and hears of their failure).
  void drain() { buckets_.drain(); }
  [[nodiscard]] std::size_t buckets_last_step() const { return buckets_.buckets_last_step(); }
  void set_overlap(bool overlap) { buckets_.set_overlap(overlap); }

 private:
  nn_cuda::context& ctx_;
  cuda_resnet& net_;
  nn_cuda::sgd& optimizer_;
  gradient_buckets<collectives_type, device_gradients<nn_cuda::parameter>> buckets_;
  int ranks_;
  nn_cuda::softmax_cross_entropy loss_;
  // Its own, made once: a loss allocates pinned memory, and freeing that waits for the
  // whole device, collectives' gates included.
  nn_cuda::softmax_cross_entropy eval_loss_;
};

}  // namespace mimatrix::resnet::train
