// allgather_perf: mimatrix's allgather over libfabric, in nccl-tests' flags and columns.
#include "collective_perf.hpp"

int main(int argc, char** argv) {
  return mimatrix::perf::collective_main(mimatrix::perf::collective::allgather, argc, argv, "allgather_perf");
}
