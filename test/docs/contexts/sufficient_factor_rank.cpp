// A rank of an in-process group as sufficient_factor_test.cpp has it: the layer's shape
// `upper`, this rank's factors `a` (U and V) and the gradient `dw_a` to rebuild.
#include <cstddef>
#include <vector>

#include <mimatrix/mimatrix.hpp>
// SNIPPET_HEAD
using namespace mimatrix;
using transport::inproc;

struct factors {
  std::vector<float> u;  // M×K column-major
  std::vector<float> v;  // N×K column-major
};

void snippet() {
  transport::run_inproc(2, [](int rank, transport::inproc::world& world) {
    communicator<transport::inproc> comm(world, rank);
    const fully_connected_shape upper{64, 10, 128};
    const factors a{std::vector<float>(64 * 128), std::vector<float>(10 * 128)};
    std::vector<float> dw_a(64 * 10);
// SNIPPET
  });
}
