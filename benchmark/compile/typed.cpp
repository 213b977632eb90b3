// Compile-time unit (issue 10): one typed allreduce over fabric, called once.
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/transport/fabric.hpp"

int main() {
  mimatrix::communicator<mimatrix::transport::fabric> comm;
  mimatrix::allreduce<mimatrix::transport::fabric, mimatrix::topology::ring, mimatrix::reduce::sum<float>> sum(comm);
  std::vector<float> v(1000, 1.0f);
  sum(v);
  return v[0] == float(comm.size()) ? 0 : 1;
}
