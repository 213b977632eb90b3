// A rank of an in-process group, inside mimatrix's namespace as the algorithm pages write.
#include <mimatrix/mimatrix.hpp>
// SNIPPET_HEAD

namespace mimatrix {
inline void snippet() {
  transport::run_inproc(2, [](int rank, transport::inproc::world& world) {
    communicator<transport::inproc> comm(world, rank);
// SNIPPET
  });
}
}  // namespace mimatrix

int main() { mimatrix::snippet(); }
