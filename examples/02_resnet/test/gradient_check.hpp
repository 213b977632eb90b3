// Central finite differences against an analytic gradient: the check every layer's test
// (CPU and GPU) makes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <vector>

namespace mimatrix::resnet::test {

/// max |central difference - analytic| / max |analytic| over every entry of x, for the
/// scalar loss() (which reads x); x is perturbed by +-step in place and restored.
inline double gradient_error(const std::function<double()>& loss, std::vector<float>& x,
                             const std::vector<float>& analytic, float step) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + step;
    const double plus = loss();
    x[i] = saved - step;
    const double minus = loss();
    x[i] = saved;
    const double numeric = (plus - minus) / (2.0 * double{step});
    worst = std::max(worst, std::abs(numeric - analytic[i]));
    scale = std::max(scale, std::abs(double{analytic[i]}));
  }
  return worst / std::max(scale, 1e-12);
}

}  // namespace mimatrix::resnet::test
