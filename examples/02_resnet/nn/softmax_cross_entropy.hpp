// Softmax cross-entropy over N x K logits, averaged over the batch, and its gradient; plain
// C++ (the classifier is tiny), stable by subtracting each row's maximum before exp.
#pragma once

#include "tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

namespace mimatrix::resnet::nn {

// @par Thread Safety: a plain value type.
class softmax_cross_entropy {
 public:
  // Returns the mean loss; remembers the probabilities for backward. Labels as the data
  // pipeline gives them (bytes), or wider for more than 256 classes.
  double forward(const tensor& logits, std::span<const std::uint8_t> labels) {
    return forward_any(logits, labels);
  }
  double forward(const tensor& logits, std::span<const std::int32_t> labels) {
    return forward_any(logits, labels);
  }

  // The mean loss's gradient with respect to the logits: (softmax - one_hot) / N.
  [[nodiscard]] tensor backward() const {
    tensor grad = probabilities_;
    const auto n = grad.dim(0), k = grad.dim(1);
    for (std::int64_t i = 0; i < n; ++i) grad.data[i * k + labels_[i]] -= 1.0f;
    for (float& g : grad.data) g /= static_cast<float>(n);
    return grad;
  }

  // How many rows of the last forward had their label as the largest logit.
  [[nodiscard]] std::int64_t correct() const { return correct_; }

 private:
  template <class Label>
  double forward_any(const tensor& logits, std::span<const Label> labels) {
    const auto n = logits.dim(0), k = logits.dim(1);
    if (static_cast<std::int64_t>(labels.size()) != n)
      throw std::invalid_argument("softmax_cross_entropy: one label per row of logits");
    probabilities_ = tensor(logits.shape);
    labels_.assign(labels.begin(), labels.end());
    correct_ = 0;
    double loss = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const float* row = logits.data.data() + i * k;
      float* p = probabilities_.data.data() + i * k;
      const std::int64_t label = labels_[i];
      if (label < 0 || label >= k)
        throw std::invalid_argument("softmax_cross_entropy: label out of range");
      const float* top = std::max_element(row, row + k);
      double sum = 0;
      for (std::int64_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(row[j] - *top));
      const double log_sum = std::log(sum);
      for (std::int64_t j = 0; j < k; ++j)
        p[j] = static_cast<float>(std::exp(row[j] - *top - log_sum));
      loss -= row[label] - *top - log_sum;
      correct_ += (top - row) == label;
    }
    return loss / static_cast<double>(n);
  }

  tensor probabilities_;
  std::vector<std::int64_t> labels_;
  std::int64_t correct_ = 0;
};

}  // namespace mimatrix::resnet::nn
