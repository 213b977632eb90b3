#!/usr/bin/env bash
# resnet_train's refusals as a user meets them: a global batch smaller than the ranks (a
# rank with no samples divided by zero: SIGFPE, no message) is refused on every rank; an
# unwritable --checkpoint ends both ranks at once (the peer waited ~60 s in a collective);
# SIGTERM and SIGINT print "interrupted" and exit 143 and 130 (a bare 1 before).
#
#   examples/02_resnet/test/cli_test.sh <build dir>
set -u
build=${1:?usage: cli_test.sh <build dir>}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export MIMATRIX_PROVIDER=${MIMATRIX_PROVIDER:-shm}
train="$build/examples/02_resnet/resnet_train"
two() { timeout 60 "$build/examples/mimatrix-run/mimatrix-run" -n 2 "$train" --threads 1 --no-eval "$@"; }
fail() { cat "$dir/log"; echo "FAIL: $*"; exit 1; }

two --epochs 1 --steps 2 --batch 1 >"$dir/log" 2>&1 && fail "--batch 1 on 2 ranks ran"
grep -q -- "--batch 1 is smaller than the 2 ranks" "$dir/log" || fail "--batch 1 on 2 ranks: no message"

start=$SECONDS
two --epochs 2 --steps 4 --batch 8 --checkpoint "$dir/missing/x.ckpt" >"$dir/log" 2>&1 && fail "unwritable checkpoint ran"
grep -q "cannot create" "$dir/log" || fail "unwritable checkpoint: no message"
((SECONDS - start < 20)) || fail "unwritable checkpoint: took $((SECONDS - start)) s"

for sig in TERM:143 INT:130; do
  timeout 60 "$train" --threads 1 --no-eval --epochs 1 --steps 14000 --batch 4 >"$dir/log" 2>&1 &
  pid=$!
  # Once resnet_train (timeout's child) has its handlers in (SigCgt holds INT and TERM),
  # not after a guessed 3 s; timeout passes the signal on.
  for _ in $(seq 200); do
    child=$(cat "/proc/$pid/task/$pid/children" 2>/dev/null)
    mask=$(awk '/^SigCgt:/ {print $2}' "/proc/${child%% *}/status" 2>/dev/null)
    [[ -n $mask ]] && (((16#$mask & 0x4002) == 0x4002)) && break
    sleep 0.05
  done
  kill -"${sig%:*}" "$pid"
  wait "$pid"
  rc=$?
  [[ $rc == "${sig#*:}" ]] || fail "SIG${sig%:*}: exit $rc, not ${sig#*:}"
  grep -q "interrupted" "$dir/log" || fail "SIG${sig%:*}: no message"
done
echo "PASS: refused with messages"
