// A process of a job over libfabric before its communicator: a gradient of floats.
// NEEDS: <rdma/fabric.h>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mimatrix/mimatrix.hpp>
#include <mimatrix/transport/fabric.hpp>
// SNIPPET_HEAD
void snippet() {
  std::vector<float> gradients(1 << 20);
// SNIPPET
}
