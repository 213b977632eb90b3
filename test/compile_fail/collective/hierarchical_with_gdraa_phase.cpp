// GDRAA's one-sided writes cannot be a phase of a hierarchical collective (schedule::embed
// translates two-sided steps only): mesh nodes have no default hierarchical algorithm.
#include <mimatrix/mimatrix.hpp>

int main() {
  using nodes = mimatrix::topology::hierarchical<mimatrix::topology::mesh, mimatrix::topology::bigraph>;
  mimatrix::transport::inproc::world world(1);
  mimatrix::communicator<mimatrix::transport::inproc> comm(world, 0);
  mimatrix::allreduce<mimatrix::transport::inproc, nodes, mimatrix::reduce::sum<float>> sum(comm, nodes(1));
}
