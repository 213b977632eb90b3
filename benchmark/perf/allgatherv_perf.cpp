// allgatherv_perf: mimatrix's allgatherv over libfabric, in nccl-tests' flags and columns;
// --skew S makes the ranks' blocks uneven.
#include "collective_perf.hpp"

int main(int argc, char** argv) {
  return mimatrix::perf::collective_main(mimatrix::perf::collective::allgatherv, argc, argv, "allgatherv_perf");
}
