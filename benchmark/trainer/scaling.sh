#!/usr/bin/env bash
# Images/s of resnet_train on 1, 2 and 4 local ranks, over shm and tcp, with wait-free
# backpropagation (WFBP) and without (every allreduce after backward), and the fraction of
# gradient communication WFBP hides (measured in the same run: every --measure-every-th step
# runs without overlap, and the others' wait after backward is compared with its).
# Prints a markdown table.
#   benchmark/trainer/scaling.sh [--build build/default] [--steps 40] [--ranks "1 2 4"]
#                                [--providers "shm tcp"] [--model resnet20] [--batch 128]
#                                [--extra "resnet_train flags"]
# The machine's cores are shared: R ranks get max(1, cores/R) oneDNN threads each, so the
# ideal on a fixed machine is 1 rank's images/s, not R times it.
set -euo pipefail
cd "$(dirname "$0")/../.."

build=build/default steps=40 ranks="1 2 4" providers="shm tcp" model=resnet20 batch=128 extra=""
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --providers) providers=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --extra) extra=$2; shift 2 ;;
    -h|--help) sed -n '2,12s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "scaling: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
trainer=$build/examples/02_resnet/resnet_train
launcher=$build/examples/mimatrix-run/mimatrix-run
[[ -x $trainer && -x $launcher ]] || { echo "scaling: build resnet_train and mimatrix-run first ($build)" >&2; exit 1; }
cores=$(nproc)
log=$(mktemp)
trap 'rm -f "$log"' EXIT

field() { sed -nE "s|.*$1 ([0-9.]+).*|\1|p" <<<"$2"; }
run() {  # run <provider> <ranks> <flags...>: prints rank 0's last epoch line
  local provider=$1 n=$2
  shift 2
  local threads=$((cores / n > 0 ? cores / n : 1))
  # shellcheck disable=SC2086
  MIMATRIX_PROVIDER=$provider "$launcher" -n "$n" -x OMP_NUM_THREADS=$threads "$trainer" --model "$model" \
    --batch "$batch" --epochs 1 --steps "$steps" --no-eval --threads "$threads" --measure-every 4 $extra "$@" \
    >"$log" 2>&1 || { cat "$log" >&2; return 1; }
  grep -E '^(\[0\] )?epoch' "$log" | tail -n 1
}

echo "| model | provider | ranks | WFBP | images/s | vs 1 rank | grad wait ms/step | hidden |"
echo "|---|---|---|---|---|---|---|---|"
base=$(field "images/s" "$(run shm 1)")
echo "| $model | - | 1 | - | $base | 1.00 | - | - |"
for provider in $providers; do
  for n in $ranks; do
    ((n > 1)) || continue
    for wfbp in on off; do
      line=$(run "$provider" "$n" $([[ $wfbp == off ]] && echo --no-overlap))
      ips=$(field "images/s" "$line")
      wait=$(field "grad-wait" "$line")
      hidden=$(sed -nE 's/.*hidden ([0-9]+%) \(of ([0-9.]+)ms\).*/\1 of \2 ms/p' <<<"$line")
      ratio=$(awk -v a="$ips" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
      echo "| $model | $provider | $n | $wfbp | $ips | $ratio | ${wait:--} | ${hidden:--} |"
    done
  done
done
