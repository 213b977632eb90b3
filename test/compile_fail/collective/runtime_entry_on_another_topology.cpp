// With separate compilation, collectives<> on a topology mimatrix::compiled does not hold
// (hierarchical) instantiates algorithm::automatic here, so it needs its header: without
// it the compiler must say so.
#define MIMATRIX_SEPARATE_COMPILATION
#include "mimatrix/collectives.hpp"
#include "mimatrix/topology/hierarchical.hpp"
#include "mimatrix/transport/inproc.hpp"
#if defined(WITH_AUTOMATIC)
#include "mimatrix/algorithm/automatic.hpp"
#endif

int main() {
  mimatrix::transport::inproc::world world(1);
  mimatrix::communicator<mimatrix::transport::inproc> comm(world, 0);
  mimatrix::collectives<mimatrix::transport::inproc, mimatrix::topology::hierarchical<>> coll(comm);
  return 0;
}
