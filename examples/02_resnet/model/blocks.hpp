// ResNet building blocks over a layer set (layers.hpp or cuda_layers.hpp): convolution + batch
// norm, the basic block (two 3x3 convolutions) and the bottleneck (1x1, 3x3, 1x1 x4), each
// with its shortcut. Backward reports every parameter the moment its gradient is final, for
// wait-free backpropagation.
#pragma once


#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace mimatrix::resnet::model {

/// Called with each parameter as soon as backward has written its gradient, in the same
/// order on every rank (a trainer starts the gradient's allreduce there).
template <class Layers>
using gradient_ready_for = std::function<void(typename Layers::parameter&)>;

/// What forward computes: training (batch statistics, kept for backward) or evaluation.
enum class phase { train, eval };

/// A block's parameters, in forward order, and the batch norms (their running statistics
/// are state a checkpoint keeps; synchronized batch norm is set on them).
template <class Layers>
struct parts {
  std::vector<typename Layers::parameter*> parameters;
  std::vector<typename Layers::batch_norm*> norms;
};

// @par Thread Safety: as its context (one thread at a time); so is every type below.
template <class Layers>
class conv_bn {
 public:
  using context = typename Layers::context;
  using tensor = typename Layers::tensor;

  conv_bn(context& ctx, std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride,
          std::int64_t padding, std::mt19937& rng)
      : conv_(ctx, in, out, kernel, stride, padding, rng), bn_(ctx, out) {}

  tensor forward(const tensor& x, phase p) {
    tensor y = conv_.forward(x);
    return p == phase::train ? bn_.forward(std::move(y)) : bn_.infer(y);
  }
  tensor backward(const tensor& grad, const gradient_ready_for<Layers>& ready) {
    const tensor g = bn_.backward(grad);
    ready(bn_.gamma());
    ready(bn_.beta());
    tensor dx = conv_.backward(g);
    ready(conv_.weight());
    return dx;
  }
  void collect(parts<Layers>& into) {
    into.parameters.insert(into.parameters.end(), {&conv_.weight(), &bn_.gamma(), &bn_.beta()});
    into.norms.push_back(&bn_);
  }
  [[nodiscard]] typename Layers::batch_norm& norm() { return bn_; }

 private:
  typename Layers::conv2d conv_;
  typename Layers::batch_norm bn_;
};

/// A residual block: forward, backward reporting gradients, and its parts.
template <class Layers>
class block {
 public:
  using tensor = typename Layers::tensor;
  virtual ~block() = default;
  virtual tensor forward(const tensor& x, phase p) = 0;
  virtual tensor backward(const tensor& grad, const gradient_ready_for<Layers>& ready) = 0;
  virtual void collect(parts<Layers>& into) = 0;
};

namespace detail {

// The shortcut: identity when the shape is kept, else a strided 1x1 convolution and batch
// norm (He et al.'s option B). Adds its gradient into the main path's.
template <class Layers>
class shortcut {
 public:
  using context = typename Layers::context;
  using tensor = typename Layers::tensor;

  shortcut(context& ctx, std::int64_t in, std::int64_t out, std::int64_t stride, std::mt19937& rng) : ctx_(ctx) {
    if (in != out || stride != 1) projection_.emplace(ctx, in, out, 1, stride, 0, rng);
  }
  /// y += shortcut(x), in place: the residual add without a copy of either.
  void add_into(tensor& y, const tensor& x, phase p) {
    if (projection_) return Layers::accumulate(ctx_, y, projection_->forward(x, p));
    Layers::accumulate(ctx_, y, x);
  }
  void backward_into(tensor& dx, const tensor& grad, const gradient_ready_for<Layers>& ready) {
    if (projection_) return Layers::accumulate(ctx_, dx, projection_->backward(grad, ready));
    Layers::accumulate(ctx_, dx, grad);
  }
  void collect(parts<Layers>& into) {
    if (projection_) projection_->collect(into);
  }

 private:
  context& ctx_;
  std::optional<conv_bn<Layers>> projection_;
};

}  // namespace detail

/// 3x3 (stride s) -> BN -> ReLU -> 3x3 -> BN, plus the shortcut, then ReLU.
template <class Layers>
class basic_block final : public block<Layers> {
 public:
  using context = typename Layers::context;
  using tensor = typename Layers::tensor;

  basic_block(context& ctx, std::int64_t in, std::int64_t out, std::int64_t stride, std::mt19937& rng)
      : a_(ctx, in, out, 3, stride, 1, rng), b_(ctx, out, out, 3, 1, 1, rng), shortcut_(ctx, in, out, stride, rng),
        relu_a_(ctx), relu_out_(ctx) {}

  tensor forward(const tensor& x, phase p) override {
    const tensor h = relu_a_.forward(a_.forward(x, p));
    tensor y = b_.forward(h, p);
    shortcut_.add_into(y, x, p);
    return relu_out_.forward(std::move(y));
  }
  tensor backward(const tensor& grad, const gradient_ready_for<Layers>& ready) override {
    const tensor g = relu_out_.backward(grad);
    tensor dx = a_.backward(relu_a_.backward(b_.backward(g, ready)), ready);
    shortcut_.backward_into(dx, g, ready);
    return dx;
  }
  void collect(parts<Layers>& into) override {
    a_.collect(into);
    b_.collect(into);
    shortcut_.collect(into);
  }

 private:
  conv_bn<Layers> a_, b_;
  detail::shortcut<Layers> shortcut_;
  typename Layers::relu relu_a_, relu_out_;
};

/// 1x1 -> BN -> ReLU -> 3x3 (stride s) -> BN -> ReLU -> 1x1 (x4 channels) -> BN, plus the
/// shortcut, then ReLU (ResNet-50's, the stride on the 3x3 as torchvision's v1.5).
template <class Layers>
class bottleneck final : public block<Layers> {
 public:
  using context = typename Layers::context;
  using tensor = typename Layers::tensor;
  static constexpr std::int64_t expansion = 4;

  bottleneck(context& ctx, std::int64_t in, std::int64_t width, std::int64_t stride, std::mt19937& rng)
      : a_(ctx, in, width, 1, 1, 0, rng), b_(ctx, width, width, 3, stride, 1, rng),
        c_(ctx, width, width * expansion, 1, 1, 0, rng), shortcut_(ctx, in, width * expansion, stride, rng),
        relu_a_(ctx), relu_b_(ctx), relu_out_(ctx) {}

  tensor forward(const tensor& x, phase p) override {
    const tensor h = relu_b_.forward(b_.forward(relu_a_.forward(a_.forward(x, p)), p));
    tensor y = c_.forward(h, p);
    shortcut_.add_into(y, x, p);
    return relu_out_.forward(std::move(y));
  }
  tensor backward(const tensor& grad, const gradient_ready_for<Layers>& ready) override {
    const tensor g = relu_out_.backward(grad);
    const tensor dh = relu_b_.backward(c_.backward(g, ready));
    tensor dx = a_.backward(relu_a_.backward(b_.backward(dh, ready)), ready);
    shortcut_.backward_into(dx, g, ready);
    return dx;
  }
  void collect(parts<Layers>& into) override {
    a_.collect(into);
    b_.collect(into);
    c_.collect(into);
    shortcut_.collect(into);
  }

 private:
  conv_bn<Layers> a_, b_, c_;
  detail::shortcut<Layers> shortcut_;
  typename Layers::relu relu_a_, relu_b_, relu_out_;
};

}  // namespace mimatrix::resnet::model
