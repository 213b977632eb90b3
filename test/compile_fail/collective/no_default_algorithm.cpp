// A topology with no default algorithm: the allreduce must say so in a sentence.
#include <mimatrix/mimatrix.hpp>

struct star {
  static constexpr const char* name = "star";
  void check(int) const {}
};

int main() {
  mimatrix::transport::inproc::world world(1);
  mimatrix::communicator<mimatrix::transport::inproc> comm(world, 0);
  mimatrix::allreduce<mimatrix::transport::inproc, star, mimatrix::reduce::sum<float>> sum(comm);
}
