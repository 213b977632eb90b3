// ResNet building blocks over the nn layers: convolution + batch norm, the basic block
// (two 3x3 convolutions) and the bottleneck (1x1, 3x3, 1x1 x4), each with its shortcut.
// Backward reports every parameter the moment its gradient is final, for wait-free
// backpropagation.
#pragma once

#include "nn/batch_norm.hpp"
#include "nn/context.hpp"
#include "nn/conv2d.hpp"
#include "nn/relu.hpp"
#include "nn/tensor.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace mimatrix::resnet::model {

/// Called with each parameter as soon as backward has written its gradient, in the same
/// order on every rank (a trainer starts the gradient's allreduce there).
using gradient_ready = std::function<void(nn::parameter&)>;

/// What forward computes: training (batch statistics, kept for backward) or evaluation.
enum class phase { train, eval };

/// A block's parameters, in forward order, and the batch norms (their running statistics
/// are state a checkpoint keeps; synchronized batch norm is set on them).
struct parts {
  std::vector<nn::parameter*> parameters;
  std::vector<nn::batch_norm*> norms;
};

// @par Thread Safety: as its context (one thread at a time); so is every type below.
class conv_bn {
 public:
  conv_bn(nn::context& ctx, std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride,
          std::int64_t padding, std::mt19937& rng)
      : conv_(ctx, in, out, kernel, stride, padding, rng), bn_(ctx, out) {}

  nn::tensor forward(const nn::tensor& x, phase p) {
    const nn::tensor y = conv_.forward(x);
    return p == phase::train ? bn_.forward(y) : bn_.infer(y);
  }
  nn::tensor backward(const nn::tensor& grad, const gradient_ready& ready) {
    const nn::tensor g = bn_.backward(grad);
    ready(bn_.gamma());
    ready(bn_.beta());
    nn::tensor dx = conv_.backward(g);
    ready(conv_.weight());
    return dx;
  }
  void collect(parts& into) {
    into.parameters.insert(into.parameters.end(), {&conv_.weight(), &bn_.gamma(), &bn_.beta()});
    into.norms.push_back(&bn_);
  }
  [[nodiscard]] nn::batch_norm& norm() { return bn_; }

 private:
  nn::conv2d conv_;
  nn::batch_norm bn_;
};

/// A residual block: forward, backward reporting gradients, and its parts.
class block {
 public:
  virtual ~block() = default;
  virtual nn::tensor forward(const nn::tensor& x, phase p) = 0;
  virtual nn::tensor backward(const nn::tensor& grad, const gradient_ready& ready) = 0;
  virtual void collect(parts& into) = 0;
};

namespace detail {

// The shortcut: identity when the shape is kept, else a strided 1x1 convolution and batch
// norm (He et al.'s option B). Adds its gradient into the main path's.
class shortcut {
 public:
  shortcut(nn::context& ctx, std::int64_t in, std::int64_t out, std::int64_t stride, std::mt19937& rng) {
    if (in != out || stride != 1) projection_.emplace(ctx, in, out, 1, stride, 0, rng);
  }
  /// y += shortcut(x), in place: the residual add without a copy of either.
  void add_into(nn::tensor& y, const nn::tensor& x, phase p) {
    if (projection_) return add(y, projection_->forward(x, p));
    add(y, x);
  }
  void backward_into(nn::tensor& dx, const nn::tensor& grad, const gradient_ready& ready) {
    if (projection_) return add(dx, projection_->backward(grad, ready));
    add(dx, grad);
  }
  void collect(parts& into) {
    if (projection_) projection_->collect(into);
  }

 private:
  static void add(nn::tensor& into, const nn::tensor& other) {
    if (into.shape != other.shape) throw std::invalid_argument("residual add: the shapes differ");
    float* a = into.data.data();
    const float* b = other.data.data();
    const auto n = std::int64_t(into.size());
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) a[i] += b[i];
  }

  std::optional<conv_bn> projection_;
};

}  // namespace detail

/// 3x3 (stride s) -> BN -> ReLU -> 3x3 -> BN, plus the shortcut, then ReLU.
class basic_block final : public block {
 public:
  basic_block(nn::context& ctx, std::int64_t in, std::int64_t out, std::int64_t stride, std::mt19937& rng)
      : a_(ctx, in, out, 3, stride, 1, rng), b_(ctx, out, out, 3, 1, 1, rng), shortcut_(ctx, in, out, stride, rng),
        relu_a_(ctx), relu_out_(ctx) {}

  nn::tensor forward(const nn::tensor& x, phase p) override {
    const nn::tensor h = relu_a_.forward(a_.forward(x, p));
    nn::tensor y = b_.forward(h, p);
    shortcut_.add_into(y, x, p);
    return relu_out_.forward(y);
  }
  nn::tensor backward(const nn::tensor& grad, const gradient_ready& ready) override {
    const nn::tensor g = relu_out_.backward(grad);
    nn::tensor dx = a_.backward(relu_a_.backward(b_.backward(g, ready)), ready);
    shortcut_.backward_into(dx, g, ready);
    return dx;
  }
  void collect(parts& into) override {
    a_.collect(into);
    b_.collect(into);
    shortcut_.collect(into);
  }

 private:
  conv_bn a_, b_;
  detail::shortcut shortcut_;
  nn::relu relu_a_, relu_out_;
};

/// 1x1 -> BN -> ReLU -> 3x3 (stride s) -> BN -> ReLU -> 1x1 (x4 channels) -> BN, plus the
/// shortcut, then ReLU (ResNet-50's, the stride on the 3x3 as torchvision's v1.5).
class bottleneck final : public block {
 public:
  static constexpr std::int64_t expansion = 4;

  bottleneck(nn::context& ctx, std::int64_t in, std::int64_t width, std::int64_t stride, std::mt19937& rng)
      : a_(ctx, in, width, 1, 1, 0, rng), b_(ctx, width, width, 3, stride, 1, rng),
        c_(ctx, width, width * expansion, 1, 1, 0, rng), shortcut_(ctx, in, width * expansion, stride, rng),
        relu_a_(ctx), relu_b_(ctx), relu_out_(ctx) {}

  nn::tensor forward(const nn::tensor& x, phase p) override {
    const nn::tensor h = relu_b_.forward(b_.forward(relu_a_.forward(a_.forward(x, p)), p));
    nn::tensor y = c_.forward(h, p);
    shortcut_.add_into(y, x, p);
    return relu_out_.forward(y);
  }
  nn::tensor backward(const nn::tensor& grad, const gradient_ready& ready) override {
    const nn::tensor g = relu_out_.backward(grad);
    const nn::tensor dh = relu_b_.backward(c_.backward(g, ready));
    nn::tensor dx = a_.backward(relu_a_.backward(b_.backward(dh, ready)), ready);
    shortcut_.backward_into(dx, g, ready);
    return dx;
  }
  void collect(parts& into) override {
    a_.collect(into);
    b_.collect(into);
    c_.collect(into);
    shortcut_.collect(into);
  }

 private:
  conv_bn a_, b_, c_;
  detail::shortcut shortcut_;
  nn::relu relu_a_, relu_b_, relu_out_;
};

}  // namespace mimatrix::resnet::model
