// A rank of an in-process group, with mimatrix's names as the algorithm pages write them.
#include <cstddef>
#include <vector>

#include <mimatrix/mimatrix.hpp>
// SNIPPET_HEAD
using namespace mimatrix;

void snippet() {
  transport::run_inproc(2, [](int rank, transport::inproc::world& world) {
    communicator<transport::inproc> comm(world, rank);
// SNIPPET
  });
}
