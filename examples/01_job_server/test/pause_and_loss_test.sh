#!/usr/bin/env bash
# The job server stopped and lost, as a black-box test found them (2026-12-02): stopped
# (SIGSTOP) for twice its heartbeat deadline, it closed a healthy worker at SIGCONT, before
# reading the heartbeats waiting in its socket; killed for good, its workers with
# --reconnect-ms waited 10 min for an assignment rather than end after the reconnect time.
# (It went on training while its group did: the server is not on a step's path.) Prints
# PASS or what failed.
#
#   examples/01_job_server/test/pause_and_loss_test.sh <build dir>
set -uo pipefail
build=${1:?usage: pause_and_loss_test.sh <build dir>}
dir=$(mktemp -d)
pids=()
cleanup() { kill -CONT "${pids[@]}" 2>/dev/null; kill -9 "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do echo "--- $f"; tail -n 20 "$f"; done; exit 1; }
export MIMATRIX_JOB_SECRET=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export MIMATRIX_PROVIDER=${MIMATRIX_PROVIDER:-shm}
port=$((32000 + RANDOM % 1000))

"$build/examples/01_job_server/job_server" serve --port "$port" --workers 2 --heartbeat-ms 2000 >"$dir/server.log" 2>&1 &
server=$!
pids+=($server)
sleep 0.3
for w in 0 1; do
  timeout 60 "$build/examples/01_job_server/job_worker" --port "$port" --steps 100000000 --elements 4096 \
    --reconnect-ms 2000 >"$dir/worker$w.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 300); do grep -q "generation 1 formed" "$dir/server.log" && break; sleep 0.1; done
grep -q "generation 1 formed" "$dir/server.log" || fail "generation 1 did not form"
sleep 1
kill -STOP "$server"
sleep 4.5
kill -CONT "$server"
sleep 3  # more than the heartbeat deadline, counted from SIGCONT
grep -E "missed heartbeats|revoked" "$dir/server.log" && fail "a pause of the server dropped a healthy worker"

# The server is not on a step's path: a generation goes on without it, until it fails. Then
# the survivor asks for the next one, and no server is there to give it.
kill -9 "$server"
sleep 0.5
pkill -9 -P "${pids[2]}"  # worker 1 itself, not its timeout
start=$SECONDS
wait "${pids[1]}" && fail "worker 0 went on without its server"
grep -q "not made again within 2000 ms" "$dir/worker0.log" || fail "worker 0: no message for a server gone for good"
((SECONDS - start < 20)) || fail "worker 0 took $((SECONDS - start)) s to end without its server"
echo "PASS: a paused server kept its workers, a lost one ended them"
