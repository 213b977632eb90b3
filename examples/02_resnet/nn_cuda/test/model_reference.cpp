// See model_reference.hpp.
#include "model_reference.hpp"

#include "model/resnet.hpp"
#include "nn/softmax_cross_entropy.hpp"

#include <random>

namespace mimatrix::resnet::nn_cuda::test {

model_step cpu_model_step(const std::string& model, std::uint32_t seed, std::span<const float> images,
                          std::vector<std::int64_t> shape, std::span<const std::uint8_t> labels, std::int64_t classes) {
  nn::context ctx;
  std::mt19937 rng(seed);
  model::resnet net(ctx, model::architecture_named(model), shape[1], classes, rng);
  nn::tensor x(shape);
  x.data.assign(images.begin(), images.end());
  model_step out;
  const nn::tensor logits = net.forward(x, model::phase::train);
  out.logits = logits.data;
  nn::softmax_cross_entropy loss;
  out.loss = loss.forward(logits, labels);
  net.backward(loss.backward(), [](nn::parameter&) {});
  for (const nn::parameter* p : net.parameters()) out.parameter_grads.push_back(p->grad.data);
  return out;
}

}  // namespace mimatrix::resnet::nn_cuda::test
