// SGD's update rule, one element at a time, as torch.optim.SGD computes it: shared by the CPU
// optimizer (optim/sgd.hpp) and the GPU one (nn_cuda/sgd.hpp), so both compute the same thing.
// Plain C++ that nvcc also compiles for the device.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#define MIMATRIX_RESNET_HOST_DEVICE __host__ __device__
#else
#define MIMATRIX_RESNET_HOST_DEVICE
#endif

namespace mimatrix::resnet::optim {

/// torch.optim.SGD's hyperparameters, with the defaults of the ResNet trainer (not PyTorch's,
/// whose momentum and weight decay are 0 and nesterov false).
/// @par Thread Safety
/// A plain value.
struct sgd_settings {
  float momentum = 0.9f;
  float dampening = 0;
  float weight_decay = 5e-4f;
  bool nesterov = true;
};

/// Throws std::invalid_argument, as PyTorch's constructor does, for a negative momentum or
/// weight decay, and for Nesterov momentum without momentum or with dampening.
inline void check_settings(const sgd_settings& s) {
  if (!(s.momentum >= 0))
    throw std::invalid_argument("sgd: invalid momentum " + std::to_string(s.momentum) + " (must be >= 0)");
  if (!(s.weight_decay >= 0))
    throw std::invalid_argument("sgd: invalid weight decay " + std::to_string(s.weight_decay) + " (must be >= 0)");
  if (s.nesterov && (s.momentum <= 0 || s.dampening != 0))
    throw std::invalid_argument("sgd: Nesterov momentum requires a momentum > 0 and zero dampening (momentum " +
                                std::to_string(s.momentum) + ", dampening " + std::to_string(s.dampening) + ")");
}

/// Throws std::invalid_argument for a null or repeated parameter (it would be stepped twice),
/// or one whose grad and value differ in size. For any parameter type with a name, a value
/// and a grad (the CPU's and the GPU's).
template <class Parameter>
void check_parameters(const std::vector<Parameter*>& parameters) {
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const Parameter* p = parameters[i];
    if (p == nullptr) throw std::invalid_argument("sgd: parameter " + std::to_string(i) + " is null");
    if (std::find(parameters.begin(), parameters.begin() + static_cast<std::ptrdiff_t>(i), p) !=
        parameters.begin() + static_cast<std::ptrdiff_t>(i))
      throw std::invalid_argument("sgd: parameter '" + p->name + "' is listed twice");
    if (p->grad.size() != p->value.size())
      throw std::invalid_argument("sgd: parameter '" + p->name + "' has " + std::to_string(p->value.size()) +
                                  " values but " + std::to_string(p->grad.size()) + " gradients");
  }
}

/// A finite learning rate >= 0 (PyTorch rejects a negative one); `step` names the step.
inline void check_learning_rate(float lr, std::int64_t step) {
  if (!(lr >= 0) || !std::isfinite(lr))
    throw std::invalid_argument("sgd: invalid learning rate " + std::to_string(lr) + " at step " +
                                std::to_string(step));
}

namespace detail {

// The update's scalars: weight decay, momentum, 1 - dampening, learning rate.
struct sgd_coefficients {
  float wd, momentum, keep, lr;
};

// One element. The flags are template arguments, so a loop over contiguous floats is
// branch-free. The operations are PyTorch's, in its order:
//   d = grad + wd * value                        (grad.add(param, alpha=wd); skipped when wd = 0)
//   buf = first ? d : buf * momentum + (1 - dampening) * d
//   d = nesterov ? d + momentum * buf : buf
//   value = value + (-lr) * d                    (param.add_(d, alpha=-lr))
// Without momentum, `buf` is not touched.
template <bool Decay, bool Momentum, bool First, bool Nesterov>
MIMATRIX_RESNET_HOST_DEVICE inline void sgd_element(float& value, float grad, float& buf, sgd_coefficients c) {
  float d = grad;
  if constexpr (Decay) d = d + c.wd * value;
  if constexpr (Momentum) {
    float b;
    if constexpr (First) {
      b = d;
    } else {
      b = buf * c.momentum + c.keep * d;
    }
    buf = b;
    if constexpr (Nesterov) {
      d = d + c.momentum * b;
    } else {
      d = b;
    }
  }
  value = value + -c.lr * d;
}

// Calls `f.template operator()<Decay, Momentum, First, Nesterov>()` for the step's flags:
// each combination is its own loop (CPU) or kernel (GPU).
template <class F>
void with_sgd_flags(bool decay, bool momentum, bool first, bool nesterov, F&& f) {
  const auto rest = [&]<bool Decay>() {
    if (!momentum) return f.template operator()<Decay, false, false, false>();
    if (first) {
      if (nesterov) return f.template operator()<Decay, true, true, true>();
      return f.template operator()<Decay, true, true, false>();
    }
    if (nesterov) return f.template operator()<Decay, true, false, true>();
    return f.template operator()<Decay, true, false, false>();
  };
  if (decay) return rest.template operator()<true>();
  return rest.template operator()<false>();
}

}  // namespace detail

}  // namespace mimatrix::resnet::optim
