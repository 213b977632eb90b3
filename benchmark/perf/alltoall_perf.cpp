// alltoall_perf: mimatrix's alltoall over libfabric, in nccl-tests' flags and columns.
#include "collective_perf.hpp"

int main(int argc, char** argv) {
  return mimatrix::perf::collective_main(mimatrix::perf::collective::alltoall, argc, argv, "alltoall_perf");
}
