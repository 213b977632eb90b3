// Naming GDRAA as a phase of algorithm::hierarchical: the compiler must say that a
// one-sided algorithm cannot be a phase (it said only "cannot build schedules for this
// topology", found by a black-box test).
#include <mimatrix/mimatrix.hpp>

int main() {
  namespace mx = mimatrix;
  mx::transport::inproc::world world(1);
  mx::communicator<mx::transport::inproc> comm(world, 0);
  mx::allreduce<mx::transport::inproc, mx::topology::hierarchical<>, mx::reduce::sum<float>,
                mx::algorithm::hierarchical<mx::algorithm::gdraa, mx::algorithm::ring>>
      sum(comm);
}
