// The CPU network (oneDNN layers), the trainer's: basic_resnet over cpu_layers.
#pragma once

#include "model/basic_resnet.hpp"
#include "model/layers.hpp"

namespace mimatrix::resnet::model {

using resnet = basic_resnet<cpu_layers>;
using gradient_ready = gradient_ready_for<cpu_layers>;

}  // namespace mimatrix::resnet::model
