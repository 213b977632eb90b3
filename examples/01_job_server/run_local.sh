#!/usr/bin/env bash
# The job server and N local workers on this machine, over libfabric's shm: the server
# forms a generation, the workers allreduce through it, and it prints their status.
#
#   examples/01_job_server/run_local.sh <build dir> [workers=2] [steps=50]
set -euo pipefail
build=${1:?usage: run_local.sh <build dir> [workers] [steps]}
workers=${2:-2}
steps=${3:-50}
export MIMATRIX_JOB_SECRET=${MIMATRIX_JOB_SECRET:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export MIMATRIX_PROVIDER=${MIMATRIX_PROVIDER:-shm}
port=$((29000 + RANDOM % 1000))
"$build/examples/01_job_server/job_server" serve --port "$port" --workers "$workers" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
sleep 0.3
"$build/examples/mimatrix-run/mimatrix-run" -n "$workers" \
  "$build/examples/01_job_server/job_worker" --port "$port" --steps "$steps"
