// GDRAA writes directly into every peer: it needs a full mesh, so naming it for a ring
// must fail with a sentence.
#include <mimatrix/algorithm/gdraa.hpp>
#include <mimatrix/mimatrix.hpp>

int main() {
  mimatrix::transport::inproc::world world(1);
  mimatrix::communicator<mimatrix::transport::inproc> comm(world, 0);
  mimatrix::allreduce<mimatrix::transport::inproc, mimatrix::topology::ring, mimatrix::reduce::sum<float>,
                      mimatrix::algorithm::gdraa>
      sum(comm);
}
