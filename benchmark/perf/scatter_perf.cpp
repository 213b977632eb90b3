// scatter_perf: mimatrix's scatter over libfabric, in nccl-tests' flags and columns.
#include "collective_perf.hpp"

int main(int argc, char** argv) {
  return mimatrix::perf::collective_main(mimatrix::perf::collective::scatter, argc, argv, "scatter_perf");
}
