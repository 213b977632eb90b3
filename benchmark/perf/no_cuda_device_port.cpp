// -G cuda where the perf programs were built without CUDA: there is no such port.
#include "cuda_device_port.hpp"

namespace mimatrix::perf {

device::port* cuda_device_port() { return nullptr; }

}  // namespace mimatrix::perf
