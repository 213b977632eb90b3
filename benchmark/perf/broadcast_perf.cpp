// broadcast_perf: mimatrix's broadcast over libfabric, in nccl-tests' flags and columns.
#include "collective_perf.hpp"

int main(int argc, char** argv) {
  return mimatrix::perf::collective_main(mimatrix::perf::collective::broadcast, argc, argv, "broadcast_perf");
}
