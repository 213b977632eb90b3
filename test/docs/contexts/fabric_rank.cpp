// A rank of a job over libfabric: its communicator, and a gradient of n bfloat16s.
// NEEDS: <rdma/fabric.h>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mimatrix/mimatrix.hpp>
#include <mimatrix/transport/fabric.hpp>
// SNIPPET_HEAD
namespace mx = mimatrix;

void snippet() {
  mx::communicator<mx::transport::fabric> comm;
  const std::size_t n = 1 << 20;
  std::vector<std::uint16_t> storage(n);
  void* grad = storage.data();
// SNIPPET
}
