// Softmax cross-entropy over N x K logits on the GPU, averaged over the batch, and its
// gradient; stable by subtracting each row's maximum before exp. One kernel a direction: a
// warp a row, the loss and the correct count summed on the device and copied back once,
// into page-locked memory behind an event: a training step queues its whole backward pass
// before it reads them, so the GPU never idles while the host launches kernels.
#pragma once

#include "buffer.hpp"
#include "context.hpp"
#include "tensor.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

namespace mimatrix::resnet::nn_cuda::detail {

// What the forward kernel adds up over the rows.
struct softmax_totals {
  double loss;                 // sum of -log p[label]
  unsigned long long correct;  // rows whose label is the first largest logit
};

// Kernels (softmax_cross_entropy.cu). forward: probabilities and the totals (zeroed first).
// backward: grad = (probabilities - one_hot(labels)) / rows.
void softmax_cross_entropy_forward(const float* logits, const std::int32_t* labels, std::int64_t rows,
                                   std::int64_t classes, float* probabilities, softmax_totals* totals,
                                   cudaStream_t stream);
void softmax_cross_entropy_backward(const float* probabilities, const std::int32_t* labels, std::int64_t rows,
                                    std::int64_t classes, float* grad, cudaStream_t stream);

}  // namespace mimatrix::resnet::nn_cuda::detail

namespace mimatrix::resnet::nn_cuda {

// Unlike the CPU one it needs a context: its kernels run on the layers' stream.
// @par Thread Safety: as its context (one thread at a time).
class softmax_cross_entropy {
 public:
  explicit softmax_cross_entropy(context& ctx) : ctx_(&ctx), totals_(sizeof(detail::softmax_totals)) {
    void* pinned = nullptr;
    MIMATRIX_NN_CUDA_CHECK(cudaMallocHost(&pinned, sizeof(detail::softmax_totals)));
    host_totals_.reset(static_cast<detail::softmax_totals*>(pinned));
    cudaEvent_t e = nullptr;
    MIMATRIX_NN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    totals_ready_.reset(e);
  }

  // Returns the mean loss (waits for the stream); remembers the probabilities for backward.
  // Labels on the host, as the data pipeline gives them (bytes), or wider for more than 256
  // classes; checked there, copied to the device.
  double forward(const device_tensor& logits, std::span<const std::uint8_t> labels) {
    queue_forward(logits, labels);
    return mean_loss();
  }
  double forward(const device_tensor& logits, std::span<const std::int32_t> labels) {
    queue_forward(logits, labels);
    return mean_loss();
  }

  // As forward, but returns at once; mean_loss() and correct() wait for its totals, and
  // must be read before the next forward is queued.
  void queue_forward(const device_tensor& logits, std::span<const std::uint8_t> labels) {
    queue_forward_any(logits, labels);
  }
  void queue_forward(const device_tensor& logits, std::span<const std::int32_t> labels) {
    queue_forward_any(logits, labels);
  }

  // The last forward's mean loss over its rows (waits for it).
  [[nodiscard]] double mean_loss() const {
    wait_for_totals();
    return host_totals_->loss / static_cast<double>(rows_);
  }

  // The mean loss's gradient with respect to the logits: (softmax - one_hot) / N.
  [[nodiscard]] device_tensor backward() const {
    device_tensor grad(probabilities_.shape());
    detail::softmax_cross_entropy_backward(probabilities_.data(), device_labels(), probabilities_.dim(0),
                                           probabilities_.dim(1), grad.data(), ctx_->stream());
    return grad;
  }

  // How many rows of the last forward had their label as the largest logit (waits for it).
  [[nodiscard]] std::int64_t correct() const {
    wait_for_totals();
    return static_cast<std::int64_t>(host_totals_->correct);
  }

 private:
  struct pinned_free {
    void operator()(detail::softmax_totals* p) const noexcept { cudaFreeHost(p); }
  };
  struct event_destroy {
    void operator()(cudaEvent_t e) const noexcept { cudaEventDestroy(e); }
  };

  void wait_for_totals() const {
    if (rows_ == 0) throw std::logic_error("softmax_cross_entropy: no forward yet");
    MIMATRIX_NN_CUDA_CHECK(cudaEventSynchronize(totals_ready_.get()));
  }

  template <class Label>
  void queue_forward_any(const device_tensor& logits, std::span<const Label> labels) {
    if (logits.shape().size() != 2) throw std::invalid_argument("softmax_cross_entropy: logits are N x K");
    const auto n = logits.dim(0), k = logits.dim(1);
    if (static_cast<std::int64_t>(labels.size()) != n)
      throw std::invalid_argument("softmax_cross_entropy: one label per row of logits");
    if (n == 0 || k == 0) throw std::invalid_argument("softmax_cross_entropy: empty logits");
    std::vector<std::int32_t> wide(labels.size());
    for (std::size_t i = 0; i < labels.size(); ++i) {
      const auto label = static_cast<std::int64_t>(labels[i]);
      if (label < 0 || label >= k) throw std::invalid_argument("softmax_cross_entropy: label out of range");
      wide[i] = static_cast<std::int32_t>(label);
    }
    const auto stream = ctx_->stream();
    labels_.reserve(wide.size() * sizeof(std::int32_t));
    MIMATRIX_NN_CUDA_CHECK(
        cudaMemcpyAsync(labels_.data(), wide.data(), wide.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream));
    if (probabilities_.shape() != logits.shape()) probabilities_ = device_tensor(logits.shape());
    auto* totals = static_cast<detail::softmax_totals*>(totals_.data());
    detail::softmax_cross_entropy_forward(logits.data(), device_labels(), n, k, probabilities_.data(), totals, stream);
    // Overwrites the last forward's totals: read them (mean_loss, correct) before this.
    MIMATRIX_NN_CUDA_CHECK(
        cudaMemcpyAsync(host_totals_.get(), totals, sizeof(detail::softmax_totals), cudaMemcpyDeviceToHost, stream));
    MIMATRIX_NN_CUDA_CHECK(cudaEventRecord(totals_ready_.get(), stream));
    rows_ = n;
  }

  [[nodiscard]] const std::int32_t* device_labels() const { return static_cast<const std::int32_t*>(labels_.data()); }

  context* ctx_;
  device_tensor probabilities_;
  detail::device_buffer labels_;  // the last forward's, as int32
  detail::device_buffer totals_;  // one detail::softmax_totals
  std::unique_ptr<detail::softmax_totals, pinned_free> host_totals_;  // page-locked: the copy does not block
  std::unique_ptr<CUevent_st, event_destroy> totals_ready_;           // after that copy
  std::int64_t rows_ = 0;                                             // of the last forward
};

}  // namespace mimatrix::resnet::nn_cuda
