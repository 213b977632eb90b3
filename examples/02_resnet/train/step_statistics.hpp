// What a data-parallel training step measured on its rank, on either backend.
#pragma once

#include <cstdint>

namespace mimatrix::resnet::train {

/// @par Thread Safety
/// A plain value.
struct step_statistics {
  double loss_sum = 0;        // over this rank's samples
  std::int64_t correct = 0;   // of them, predicted right
  std::int64_t samples = 0;
  double compute_ms = 0;      // forward, backward, optimizer
  double wait_ms = 0;         // waiting for gradients after backward: the part not hidden
  bool wait_measured = true;  // false on the GPU: the allreduces end on the stream, unwaited
};

}  // namespace mimatrix::resnet::train
