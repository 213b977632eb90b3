// A rank of a job over libfabric that recovers from a failure: its communicator `world`,
// NEEDS: <rdma/fabric.h>
// an allreduce `sum` over it, the gradient `grads`, and how many ranks survived.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mimatrix/mimatrix.hpp>
#include <mimatrix/transport/fabric.hpp>
// SNIPPET_HEAD
using namespace std::chrono_literals;

void snippet() {
  mimatrix::communicator<mimatrix::transport::fabric> world;
  mimatrix::allreduce<mimatrix::transport::fabric, mimatrix::topology::ring, mimatrix::reduce::sum<float>> sum(world);
  std::vector<float> grads(1 << 20);
  const int survivors = 3;
// SNIPPET
}
