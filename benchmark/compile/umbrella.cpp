// Compile-time unit (issue 53 item 6): typed.cpp's one typed allreduce over fabric, with
// the umbrella header the README includes instead of the three narrow ones.
#include <mimatrix/mimatrix.hpp>
#include <mimatrix/transport/fabric.hpp>

#include <vector>

int main() {
  mimatrix::communicator<mimatrix::transport::fabric> comm;
  mimatrix::allreduce<mimatrix::transport::fabric, mimatrix::topology::ring, mimatrix::reduce::sum<float>> sum(comm);
  std::vector<float> v(1000, 1.0f);
  sum(v);
  return v[0] == float(comm.size()) ? 0 : 1;
}
