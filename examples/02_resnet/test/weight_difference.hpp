// How far two sets of weights (by parameter) lie apart: the data-parallel tests' measure, on
// the CPU and the GPU backend alike.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace mimatrix::resnet::test {

/// The largest difference between `a` and `b`, relative to the largest weight of `b`.
inline double worst_difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double worst = 0, largest = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < a[i].size(); ++j) {
      worst = std::max(worst, double(std::fabs(a[i][j] - b[i][j])));
      largest = std::max(largest, double(std::fabs(b[i][j])));
    }
  return worst / largest;
}

}  // namespace mimatrix::resnet::test
