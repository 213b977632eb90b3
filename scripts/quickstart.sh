#!/usr/bin/env bash
# The main job: install what is missing, build the `default` preset's programs, then
#   1. run the quick start: a ring allreduce across in-process ranks, checked and timed;
#   2. run allreduce_perf across local processes over libfabric, first shm then
#      tcp;ofi_rxm on loopback, beside OpenMPI, Gloo and fi_pingpong in the same run
#      (benchmark/compare), and print the ratios;
#   3. start the job server and local workers that train ResNet-20 on Fashion-MNIST
#      through it, with wait-free backpropagation (examples/02_resnet), and print each
#      epoch's loss, test accuracy and images/s.
#
#   scripts/quickstart.sh [ranks] [sizes]      defaults: 2 ranks, "8 1M 64M"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ranks=${1:-2}
sizes=${2:-"8 1M 64M"}

scripts/setup-debian.sh
cmake --preset default -DMIMATRIX_PROGRAM_OPTIMIZATION= >/dev/null  # the build type's, whatever an earlier configure set
cmake --build --preset default --parallel "${MIMATRIX_JOBS:-2}" \
  --target quickstart allreduce_perf mimatrix-run mpi_allreduce_perf gloo_allreduce_perf job_server resnet_train

echo "==> in-process ranks (transport::inproc)"
build/default/examples/00_quickstart/quickstart 4 16M

for provider in shm tcp; do
  echo
  echo "==> $ranks processes over libfabric ($provider), beside OpenMPI, Gloo and fi_pingpong"
  benchmark/compare --build build/default --ranks "$ranks" --provider "$provider" --sizes "$sizes"
done

echo
echo "==> the MiMatrix job server and $ranks local workers training ResNet-20 on Fashion-MNIST (a short run)"
examples/02_resnet/run_job.sh build/default "$ranks" --epochs 2 --steps 60 --batch 128 --test-samples 2000 2>&1 |
  grep -E "generation|resnet_train: resnet|epoch|done"
