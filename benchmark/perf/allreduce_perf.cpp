// allreduce_perf: mimatrix's allreduce over libfabric, in nccl-tests' flags and columns.
#include "collective_perf.hpp"

int main(int argc, char** argv) {
  return mimatrix::perf::collective_main(mimatrix::perf::collective::allreduce, argc, argv, "allreduce_perf");
}
