// alltoallv_perf: mimatrix's alltoallv over libfabric (c10d's all_to_all_single with split
// sizes, the MoE exchange), in nccl-tests' flags and columns; --skew S makes the splits uneven.
#include "collective_perf.hpp"

int main(int argc, char** argv) {
  return mimatrix::perf::collective_main(mimatrix::perf::collective::alltoallv, argc, argv, "alltoallv_perf");
}
