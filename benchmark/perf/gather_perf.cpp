// gather_perf: mimatrix's gather over libfabric, in nccl-tests' flags and columns.
#include "collective_perf.hpp"

int main(int argc, char** argv) {
  return mimatrix::perf::collective_main(mimatrix::perf::collective::gather, argc, argv, "gather_perf");
}
