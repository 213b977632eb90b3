# What resnet_train's job-server tests share (sourced, not run): the build directory from
# the caller's $1, a temporary directory and the processes to end on exit, fail() with
# every log, and the job's secret and provider.
set -uo pipefail
build=${1:?usage: $(basename "$0") <build dir>}
dir=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do echo "--- $f"; cat "$f"; done; exit 1; }

export MIMATRIX_JOB_SECRET=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export MIMATRIX_PROVIDER=${MIMATRIX_PROVIDER:-shm}
