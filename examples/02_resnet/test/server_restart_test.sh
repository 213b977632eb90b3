#!/usr/bin/env bash
# Training under the job server survives the server's restart: 2 workers train ResNet-20
# with --reconnect-ms; the server is killed (SIGKILL) mid-epoch and started again on the
# same port and state file; the workers join it again, it takes generation 1 back (nothing
# revoked), and they finish every step. Prints PASS or what failed.
#
#   examples/02_resnet/test/server_restart_test.sh <build dir>
source "$(dirname "$0")/job_test_setup.sh"  # build, dir, pids, fail, the secret
port=$((31000 + RANDOM % 1000))
steps=40
serve() {
  "$build/examples/01_job_server/job_server" serve --port "$port" --workers 2 --batch 32 --heartbeat-ms 3000 \
    --state-file "$dir/job.state" >"$dir/$1.log" 2>&1 &
  server=$!
  pids+=($server)
}
serve server1
sleep 0.3
workers=()
for w in 0 1; do
  "$build/examples/02_resnet/resnet_train" --job-server "127.0.0.1:$port" --reconnect-ms 30000 --batch 32 \
    --epochs 1 --steps $steps --no-eval --threads 1 --log-every 1 --sfb off >"$dir/worker$w.log" 2>&1 &
  workers+=($!)
  pids+=($!)
done

for _ in $(seq 600); do
  grep -q "step 4/" "$dir"/worker*.log 2>/dev/null && break
  sleep 0.1
done
grep -q "step 4/" "$dir"/worker*.log || fail "the first generation did not reach step 4"
kill -9 "$server"
wait "$server" 2>/dev/null
echo "killed the job server after step 4"
sleep 0.5
serve server2

for w in 0 1; do
  wait "${workers[$w]}" || fail "worker $w exited with $?"
  grep -q "done, $steps steps, last in generation 1 of 2" "$dir/worker$w.log" || fail "worker $w did not finish in generation 1"
done
grep -q "generation 1 goes on after a restart: all 2 workers are back" "$dir/server2.log" ||
  fail "the restarted server did not take generation 1 back"
grep -q "revoked" "$dir/server2.log" && fail "the restarted server revoked a generation"
last=$(grep -h "step $steps/$steps" "$dir"/worker*.log)
[[ -n $last ]] || fail "no line for the last step"
echo "$last"
echo "PASS: training went on through the job server's restart"
