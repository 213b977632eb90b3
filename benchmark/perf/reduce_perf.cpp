// reduce_perf: mimatrix's reduce over libfabric, in nccl-tests' flags and columns.
#include "collective_perf.hpp"

int main(int argc, char** argv) {
  return mimatrix::perf::collective_main(mimatrix::perf::collective::reduce, argc, argv, "reduce_perf");
}
