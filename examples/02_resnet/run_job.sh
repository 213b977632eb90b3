#!/usr/bin/env bash
# The MiMatrix job server and N local resnet_train workers on this machine (over libfabric's
# shm): the server forms a generation (ranks, local batches, shards), the workers train on
# Fashion-MNIST through it and rank 0 prints each epoch's loss, accuracy and throughput.
#
#   examples/02_resnet/run_job.sh <build dir> [workers=2] [resnet_train options...]
#   e.g. run_job.sh build/default 2 --epochs 1 --steps 100 --batch 128
set -euo pipefail
build=${1:?usage: run_job.sh <build dir> [workers] [resnet_train options...]}
workers=${2:-2}
shift $(($# >= 2 ? 2 : 1))
# The global batch the server splits: the one the workers are told (--batch), else theirs.
batch=128
args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; i++)); do [[ ${args[i]} == --batch ]] && batch=${args[i + 1]}; done
export MIMATRIX_JOB_SECRET=${MIMATRIX_JOB_SECRET:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export MIMATRIX_PROVIDER=${MIMATRIX_PROVIDER:-shm}
port=$((29000 + RANDOM % 1000))
"$build/examples/01_job_server/job_server" serve --port "$port" --workers "$workers" --batch "$batch" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
sleep 0.3
# mimatrix-run only starts the processes (and sets LOCAL_WORLD_SIZE, which shares the
# cores among them); the ranks come from the server.
"$build/examples/mimatrix-run/mimatrix-run" -n "$workers" \
  "$build/examples/02_resnet/resnet_train" --job-server "127.0.0.1:$port" --batch "$batch" "$@"
