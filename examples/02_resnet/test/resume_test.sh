#!/usr/bin/env bash
# Checkpoint and resume: two ranks train 2 epochs straight; then the same run stops after
# epoch 1 and a new pair of processes resumes from its checkpoint. Epoch 2 must print the
# same loss and accuracies (one oneDNN thread a rank: its sums in one order). PASS or why.
#
#   examples/02_resnet/test/resume_test.sh <build dir>
set -uo pipefail
build=${1:?usage: resume_test.sh <build dir>}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export MIMATRIX_PROVIDER=${MIMATRIX_PROVIDER:-shm}
train() {
  "$build/examples/mimatrix-run/mimatrix-run" -n 2 "$build/examples/02_resnet/resnet_train" --epochs 2 --steps 5 \
    --batch 32 --threads 1 --test-samples 200 --schedule cosine "$@"
}
train --checkpoint "$dir/straight.ckpt" >"$dir/straight.log" 2>&1 || { cat "$dir/straight.log"; echo "FAIL: straight run"; exit 1; }
train --checkpoint "$dir/split.ckpt" --stop-after 1 >"$dir/first.log" 2>&1 || { cat "$dir/first.log"; echo "FAIL: first half"; exit 1; }
train --checkpoint "$dir/split.ckpt" --resume >"$dir/second.log" 2>&1 || { cat "$dir/second.log"; echo "FAIL: resumed half"; exit 1; }
grep -q "resumed from .* at step 5" "$dir/second.log" || { cat "$dir/second.log"; echo "FAIL: did not resume at step 5"; exit 1; }
# The epoch line without its timing: loss, train-acc, test-acc.
straight=$(grep -o "epoch 2/2: loss [0-9.]* train-acc [0-9.]*% test-acc [0-9.]*%" "$dir/straight.log")
resumed=$(grep -o "epoch 2/2: loss [0-9.]* train-acc [0-9.]*% test-acc [0-9.]*%" "$dir/second.log")
echo "straight: $straight"
echo "resumed:  $resumed"
[[ -n $straight && $straight == "$resumed" ]] || { echo "FAIL: the resumed epoch differs"; exit 1; }
grep -q "epoch 2/2" "$dir/first.log" && { echo "FAIL: --stop-after 1 ran epoch 2"; exit 1; }
echo "PASS: resumed from the checkpoint, epoch 2 identical"
