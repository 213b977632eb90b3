#!/usr/bin/env bash
# resnet_train's refusals under the job server (a black-box test, 2026-12-02): workers
# given different training flags end at once, each naming the flag, and the server revokes
# their generation (one failed at step 5 with a mismatch naming calls, the other waited in
# a collective for 5 min, then 10 for an assignment); an unwritable --checkpoint is refused
# before training (it failed after an epoch); a port out of range is refused (99999 went
# to 34463). Prints PASS or what failed.
#
#   examples/02_resnet/test/job_refusals_test.sh <build dir>
source "$(dirname "$0")/job_test_setup.sh"  # build, dir, pids, fail, the secret
train="$build/examples/02_resnet/resnet_train"
port=$((31000 + RANDOM % 1000))
"$build/examples/01_job_server/job_server" serve --port "$port" --workers 2 --batch 16 >"$dir/server.log" 2>&1 &
pids+=($!)
sleep 0.3
start=$SECONDS
for w in 0 1; do
  timeout 120 "$train" --job-server "127.0.0.1:$port" --batch 16 --epochs 1 --steps 8 --threads 1 --no-eval \
    --log-every $((w + 4)) >"$dir/worker$w.log" 2>&1 &
  pids+=($!)
done
for w in 0 1; do
  wait "${pids[$((w + 1))]}" && fail "worker $w, given its own --log-every, ran"
  grep -q "was given another --log-every than rank 0; every rank must be given the same training flags" \
    "$dir/worker$w.log" || fail "worker $w: no message naming --log-every"
done
((SECONDS - start < 60)) || fail "workers given different flags took $((SECONDS - start)) s to end"
grep -q "generation 1 revoked: rank [01] reported: .*--log-every" "$dir/server.log" || fail "the server did not revoke"

timeout 60 "$train" --job-server "127.0.0.1:$port" --batch 16 --checkpoint "$dir/missing/x.ckpt" >"$dir/ckpt.log" 2>&1 &&
  fail "an unwritable checkpoint ran"
grep -q "cannot create" "$dir/ckpt.log" || fail "unwritable checkpoint: no message"
grep -q "generation" "$dir/ckpt.log" && fail "unwritable checkpoint: refused only after joining a generation"

timeout 60 "$train" --job-server 127.0.0.1:99999 --batch 16 >"$dir/port.log" 2>&1 && fail "port 99999 ran"
grep -q "port must be in \[1, 65535\], not 99999" "$dir/port.log" || fail "port 99999: no message"
echo "PASS: refused under the job server"
