// reduce_scatter_perf: mimatrix's reduce_scatter over libfabric, in nccl-tests' flags and columns.
#include "collective_perf.hpp"

int main(int argc, char** argv) {
  return mimatrix::perf::collective_main(mimatrix::perf::collective::reduce_scatter, argc, argv, "reduce_scatter_perf");
}
