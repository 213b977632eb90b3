// The control for the collective compile-fail tests: the valid composition compiles.
#include <mimatrix/mimatrix.hpp>

int main() {
  mimatrix::transport::inproc::world world(1);
  mimatrix::communicator<mimatrix::transport::inproc> comm(world, 0);
  mimatrix::allreduce<mimatrix::transport::inproc, mimatrix::topology::ring, mimatrix::reduce::sum<float>> sum(comm);
  float x = 1;
  sum(std::span<float>(&x, 1));
  return x == 1 ? 0 : 1;
}
