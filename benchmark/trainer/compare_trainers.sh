#!/usr/bin/env bash
# Trains the same ResNet for the same steps with PyTorch and with mimatrix's resnet_train
# (1..R ranks), and prints a markdown table of training images/s:
#   benchmark/trainer/compare_trainers.sh [--model resnet20] [--steps 40] [--batch 128]
#                                         [--ranks "1 2"] [--build build/default]
# Both sides share the machine's cores: PyTorch and a single rank use all of them, R ranks
# get max(1, cores/R) threads each, so no run oversubscribes the CPU.
set -euo pipefail
cd "$(dirname "$0")/../.."

model=resnet20 steps=40 batch=128 ranks="1 2" build=build/default
usage() { sed -n '2,7s/^# \{0,1\}//p' "$0"; exit "${1:-2}"; }
while (($#)); do
  case $1 in
    --model) model=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "compare_trainers: unknown argument '$1'" >&2; usage ;;
  esac
done

cores=$(nproc)
# Debian's python3-torch lives in /usr/bin/python3's path, which a pyenv or venv python3 hides.
python=${PYTHON:-python3}
if ! "$python" -c 'import torch' 2>/dev/null; then python=/usr/bin/python3; fi
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "compare_trainers: no PyTorch for $python; install Debian's: apt-get install -y python3-torch" >&2
  exit 1
fi
trainer=$build/examples/02_resnet/resnet_train
launcher=$build/examples/mimatrix-run/mimatrix-run
flags=(--model "$model" --batch "$batch" --epochs 1 --steps "$steps" --seed 1 --no-eval)
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

# images/s of the last "epoch i/n:" line; under mimatrix-run lines carry a "[rank] "
# prefix, and then only rank 0's count.
images_per_s() {
  local lines
  lines=$(grep -E 'epoch [0-9]+/[0-9]+:.*images/s' "$1" || true)
  if grep -qE '^\[[0-9]+\] ' <<<"$lines"; then lines=$(grep -E '^\[0\] ' <<<"$lines" || true); fi
  tail -n 1 <<<"$lines" | sed -nE 's/.*images\/s ([0-9.]+).*/\1/p'
}

rows=() failed=0
echo "compare_trainers: $model, batch $batch, $steps steps, $cores cores" >&2
echo "compare_trainers: pytorch, $cores threads" >&2
if "$python" benchmark/trainer/pytorch_resnet.py "${flags[@]}" --threads "$cores" >"$log/pytorch" 2>&1; then
  base=$(images_per_s "$log/pytorch")
else
  base=
fi
if [[ -z $base ]]; then
  echo "compare_trainers: PyTorch run failed:" >&2; cat "$log/pytorch" >&2; failed=1
fi
rows+=("| PyTorch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null) | 1 | ${base:-failed} | ${base:+1.00} |")

if [[ ! -x $trainer ]]; then
  echo "compare_trainers: no C++ trainer at $trainer (build the resnet_train target, or --build DIR); PyTorch only" >&2
  failed=1
else
  for r in $ranks; do
    threads=$((cores / r > 1 ? cores / r : 1))
    echo "compare_trainers: mimatrix, $r rank(s) x $threads thread(s)" >&2
    if ((r == 1)); then
      cmd=("$trainer" "${flags[@]}")
    else
      cmd=("$launcher" -n "$r" -x "OMP_NUM_THREADS=$threads" "$trainer" "${flags[@]}")
    fi
    rate=
    if OMP_NUM_THREADS=$threads "${cmd[@]}" >"$log/mimatrix$r" 2>&1; then rate=$(images_per_s "$log/mimatrix$r"); fi
    if [[ -z $rate ]]; then
      echo "compare_trainers: mimatrix with $r rank(s) failed:" >&2; tail -n 20 "$log/mimatrix$r" >&2; failed=1
    fi
    ratio=-
    if [[ -n $rate && -n $base ]]; then ratio=$(awk -v a="$rate" -v b="$base" 'BEGIN { printf "%.2f", a / b }'); fi
    rows+=("| mimatrix resnet_train | $r | ${rate:-failed} | $ratio |")
  done
fi

echo "| program | ranks | images/s | mimatrix/PyTorch |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit "$failed"
