// The ring algorithm builds schedules only on a ring: naming it for another topology
// must fail with a sentence.
#include <mimatrix/mimatrix.hpp>

struct star {
  static constexpr const char* name = "star";
  void check(int) const {}
};

int main() {
  mimatrix::transport::inproc::world world(1);
  mimatrix::communicator<mimatrix::transport::inproc> comm(world, 0);
  mimatrix::allreduce<mimatrix::transport::inproc, star, mimatrix::reduce::sum<float>, mimatrix::algorithm::ring>
      sum(comm);
}
