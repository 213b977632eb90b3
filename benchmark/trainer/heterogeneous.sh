#!/usr/bin/env bash
# Two resnet_train workers of unequal speed under the MiMatrix job server: each on a core
# of its own (one oneDNN thread), the second core shared with a busy loop, so the second
# worker runs at about half the first's speed. Once with equal local batches, once with
# the server balancing them to each worker's measured throughput (--rebalance-ms, the
# ring-over-heterogeneous-nodes rule b_i = B * s_i / sum(s)). Prints a markdown table:
# the local batches of each generation, and rank 0's last epoch line (images/s counts
# training steps, every generation's). A first row runs both workers without the busy
# loop, for reference.
#   benchmark/trainer/heterogeneous.sh [--build build/default] [--steps 120] [--batch 128]
#                                      [--rebalance-ms 4000] [--provider shm]
set -euo pipefail
cd "$(dirname "$0")/../.."

build=build/default steps=120 batch=128 rebalance=4000 provider=shm
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --rebalance-ms) rebalance=$2; shift 2 ;;
    --provider) provider=$2; shift 2 ;;
    -h|--help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "heterogeneous: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
server=$build/examples/01_job_server/job_server
trainer=$build/examples/02_resnet/resnet_train
[[ -x $server && -x $trainer ]] || { echo "heterogeneous: build job_server and resnet_train first ($build)" >&2; exit 1; }
(($(nproc) >= 2)) || { echo "heterogeneous: needs 2 cores" >&2; exit 1; }
export MIMATRIX_JOB_SECRET=${MIMATRIX_JOB_SECRET:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export MIMATRIX_PROVIDER=$provider
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

run() {  # run <label> <busy loop: 1|0> [server options...]: prints a table row
  local label=$1 busy=$2
  shift 2
  local port=$((29000 + RANDOM % 1000))
  "$server" serve --port "$port" --workers 2 --batch "$batch" "$@" >"$work/server.log" 2>&1 &
  local srv=$!
  pids+=("$srv")
  local hog=$srv
  if ((busy)); then
    taskset -c 1 bash -c 'while :; do :; done' &
    hog=$!
    pids+=("$hog")
  fi
  sleep 0.3
  local common=(--job-server "127.0.0.1:$port" --batch "$batch" --threads 1 --epochs 1 --steps "$steps")
  taskset -c 0 "$trainer" "${common[@]}" >"$work/fast.log" 2>&1 &
  local fast=$!
  taskset -c 1 "$trainer" "${common[@]}" >"$work/slow.log" 2>&1 &
  local slow=$!
  wait "$fast" "$slow" || { cat "$work"/*.log >&2; return 1; }
  kill "$hog" "$srv" 2>/dev/null || true
  wait "$hog" "$srv" 2>/dev/null || true
  batches() { sed -nE 's/.*generation ([0-9]+), rank [0-9]+ of [0-9]+, local batch ([0-9]+).*/g\1: \2/p' "$1" | paste -sd ' '; }
  local epoch
  epoch=$(grep -h '^epoch ' "$work/fast.log" "$work/slow.log" | tail -n 1 || true)
  printf '| %s | %s | %s | %s |\n' "$label" "$(batches "$work/fast.log")" "$(batches "$work/slow.log")" \
    "$(sed -nE 's/.*images\/s ([0-9.]+).*/\1/p' <<<"$epoch")"
}

echo "| run | fast worker's local batch by generation | slow worker's | images/s |"
echo "|---|---|---|---:|"
run "no busy loop: equal workers (reference)" 0
run "equal batches" 1
run "balanced every ${rebalance} ms" 1 --rebalance-ms "$rebalance"
