// The networks: CIFAR-style ResNet-20/32/56 (6n+2 layers of basic blocks, He et al. 2016,
// section 4.2) for small images, and ResNet-50 (bottlenecks, ImageNet stem), chosen by name,
// over a layer set (layers.hpp: the CPU's; cuda_layers.hpp: the GPU's). resnet.hpp names
// the CPU network.
#pragma once

#include "model/blocks.hpp"

#include <cstdint>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace mimatrix::resnet::model {

/// A network's shape, from its name.
struct architecture {
  std::string name;
  bool bottlenecks = false;            // ResNet-50's blocks and ImageNet stem
  std::vector<int> blocks_per_stage;   // 3 stages (CIFAR) or 4 (ImageNet)
  std::int64_t stem_channels = 16;
};

/// "resnet20", "resnet32", "resnet56" (n = 3, 5, 9 blocks a stage) or "resnet50".
inline architecture architecture_named(const std::string& name) {
  if (name == "resnet20") return {name, false, {3, 3, 3}, 16};
  if (name == "resnet32") return {name, false, {5, 5, 5}, 16};
  if (name == "resnet56") return {name, false, {9, 9, 9}, 16};
  if (name == "resnet50") return {name, true, {3, 4, 6, 3}, 64};
  throw std::invalid_argument("unknown model '" + name + "': resnet20, resnet32, resnet56 or resnet50");
}

// @par Thread Safety: as its context (one thread at a time).
template <class Layers>
class basic_resnet {
 public:
  using context = typename Layers::context;
  using tensor = typename Layers::tensor;
  using parameter = typename Layers::parameter;
  using batch_norm = typename Layers::batch_norm;

  basic_resnet(context& ctx, const architecture& arch, std::int64_t input_channels, std::int64_t classes,
         std::mt19937& rng)
      : arch_(arch),
        stem_(ctx, input_channels, arch.stem_channels, arch.bottlenecks ? 7 : 3, arch.bottlenecks ? 2 : 1,
              arch.bottlenecks ? 3 : 1, rng),
        stem_relu_(ctx), pool_(ctx), head_(ctx, features(arch), classes, rng) {
    if (arch.bottlenecks) stem_pool_ = std::make_unique<typename Layers::max_pool>(ctx, 3, 2, 1);
    std::int64_t channels = arch.stem_channels;
    for (std::size_t stage = 0; stage < arch.blocks_per_stage.size(); ++stage) {
      const std::int64_t width = arch.stem_channels << stage;
      for (int i = 0; i < arch.blocks_per_stage[stage]; ++i) {
        const std::int64_t stride = i == 0 && stage > 0 ? 2 : 1;
        if (arch.bottlenecks) {
          blocks_.push_back(std::make_unique<bottleneck<Layers>>(ctx, channels, width, stride, rng));
          channels = width * bottleneck<Layers>::expansion;
        } else {
          blocks_.push_back(std::make_unique<basic_block<Layers>>(ctx, channels, width, stride, rng));
          channels = width;
        }
      }
    }
    stem_.collect(parts_);
    for (auto& b : blocks_) b->collect(parts_);
    parts_.parameters.push_back(&head_.weight());
    parts_.parameters.push_back(&head_.bias());
  }

  /// The classifier's inputs: the last stage's channels.
  static std::int64_t features(const architecture& arch) {
    const std::int64_t last = arch.stem_channels << (arch.blocks_per_stage.size() - 1);
    return arch.bottlenecks ? last * bottleneck<Layers>::expansion : last;
  }

  /// Logits, N x classes.
  tensor forward(const tensor& images, phase p) {
    tensor x = stem_relu_.forward(stem_.forward(images, p));
    if (stem_pool_) x = stem_pool_->forward(x);
    for (auto& b : blocks_) x = b->forward(x, p);
    return head_.forward(pool_.forward(x));
  }

  /// From the logits' gradient; `ready` hears of each parameter as its gradient is final,
  /// the head's first and the stem's last.
  void backward(const tensor& grad_logits, const gradient_ready_for<Layers>& ready) {
    tensor g = pool_.backward(head_.backward(grad_logits));
    ready(head_.weight());
    ready(head_.bias());
    for (auto b = blocks_.rbegin(); b != blocks_.rend(); ++b) g = (*b)->backward(g, ready);
    if (stem_pool_) g = stem_pool_->backward(g);
    (void)stem_.backward(stem_relu_.backward(g), ready);
  }

  /// Every trained tensor, in forward order.
  [[nodiscard]] const std::vector<parameter*>& parameters() const { return parts_.parameters; }
  [[nodiscard]] const std::vector<batch_norm*>& norms() const { return parts_.norms; }
  /// The classifier: sufficient-factor broadcasting sends its weight's gradient as factors.
  [[nodiscard]] typename Layers::linear& head() { return head_; }
  [[nodiscard]] const architecture& arch() const { return arch_; }

  [[nodiscard]] std::size_t parameter_count() const {
    std::size_t n = 0;
    for (const auto* p : parts_.parameters) n += p->value.size();
    return n;
  }

 private:
  architecture arch_;
  conv_bn<Layers> stem_;
  typename Layers::relu stem_relu_;
  std::unique_ptr<typename Layers::max_pool> stem_pool_;
  std::vector<std::unique_ptr<block<Layers>>> blocks_;
  typename Layers::global_average_pool pool_;
  typename Layers::linear head_;
  parts<Layers> parts_;
};

}  // namespace mimatrix::resnet::model
