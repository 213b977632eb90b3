// ResNet-50 (v1.5, ImageNet) as the scale studies need it: every layer's parameters (its
// gradient's size) and floating-point work, gradient buckets, and an iteration's time
// with and without overlapping the allreduces with the backward pass.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace benchmark_scale {

struct layer {
  std::string name;
  double parameters = 0;       // weights and biases (BatchNorm: scale and shift)
  double forward_flops = 0;    // one image, multiply-adds counted as two
};

/// conv(k x k, cin -> cout) at an output of hw x hw, without bias, then its BatchNorm.
inline void conv_bn(std::vector<layer>& out, const std::string& name, int k, int cin, int cout, int hw) {
  const double weights = double(k) * k * cin * cout;
  out.push_back({name, weights, 2 * weights * hw * hw});
  out.push_back({name + ".bn", 2.0 * cout, 4.0 * cout * hw * hw});
}

/// In forward order: 53 convolutions, 53 BatchNorms and the classifier; 25.6M parameters.
inline std::vector<layer> resnet50_layers() {
  std::vector<layer> l;
  conv_bn(l, "conv1", 7, 3, 64, 112);
  const int blocks[4] = {3, 4, 6, 3}, widths[4] = {64, 128, 256, 512}, sizes[4] = {56, 28, 14, 7};
  int in = 64;
  for (int s = 0; s < 4; ++s)
    for (int b = 0; b < blocks[s]; ++b) {
      const std::string name = "layer" + std::to_string(s + 1) + "." + std::to_string(b);
      const int w = widths[s], hw = sizes[s];
      conv_bn(l, name + ".conv1", 1, in, w, b == 0 && s > 0 ? hw * 2 : hw);
      conv_bn(l, name + ".conv2", 3, w, w, hw);
      conv_bn(l, name + ".conv3", 1, w, 4 * w, hw);
      if (b == 0) conv_bn(l, name + ".downsample", 1, in, 4 * w, hw);
      in = 4 * w;
    }
  l.push_back({"fc", 2048.0 * 1000 + 1000, 2.0 * 2048 * 1000});
  return l;
}

/// A V100-class GPU: 30 TFLOP/s sustained in mixed precision, batch 32; backward costs
/// twice the forward pass (gradients of activations and of weights).
struct gpu_model {
  double flops_per_second = 30e12;
  int batch = 32;
  double forward(const layer& l) const { return l.forward_flops * batch / flops_per_second; }
  double backward(const layer& l) const { return 2 * forward(l); }
};

/// Gradients in the order backward produces them (last layer first), packed into buckets
/// of at least `bytes` (float32), as PyTorch DDP and Horovod's tensor fusion do.
struct bucket {
  double bytes = 0;
  std::size_t last_layer = 0;  // the forward index of the layer that completes it
};

inline std::vector<bucket> buckets_of(const std::vector<layer>& layers, double bytes) {
  std::vector<bucket> out;
  bucket current;
  for (std::size_t i = layers.size(); i-- > 0;) {
    current.bytes += 4 * layers[i].parameters;
    current.last_layer = i;
    if (current.bytes >= bytes) {
      out.push_back(current);
      current = {};
    }
  }
  if (current.bytes > 0) out.push_back(current);
  return out;
}

struct iteration_time {
  double serial = 0;      // forward, backward, then every bucket's allreduce
  double overlapped = 0;  // each bucket's allreduce from the moment its gradients are ready
};

/// `allreduce[k]`: bucket k's allreduce time. One collective runs at a time, in order.
inline iteration_time iteration(const std::vector<layer>& layers, const gpu_model& gpu,
                                const std::vector<bucket>& buckets, const std::vector<double>& allreduce) {
  double forward = 0, backward = 0, communication = 0;
  for (const auto& l : layers) forward += gpu.forward(l);
  std::vector<double> ready_at(layers.size());  // when backward has produced layer i's gradient
  double t = forward;
  for (std::size_t i = layers.size(); i-- > 0;) {
    t += gpu.backward(layers[i]);
    ready_at[i] = t;
  }
  backward = t - forward;
  double network_free = 0;
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    communication += allreduce[k];
    network_free = std::max(network_free, ready_at[buckets[k].last_layer]) + allreduce[k];
  }
  return {forward + backward + communication, std::max(forward + backward, network_free)};
}

}  // namespace benchmark_scale
