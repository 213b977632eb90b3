#!/usr/bin/env bash
# benchmark/emulate/emulated_cluster.sh: an emulated cluster of Linux network namespaces on
# this machine (hosts behind one switch, each host's link rate-capped with tc), and
# allreduce_perf run across it over libfabric's tcp;ofi_rxm, ranks bootstrapped as torchrun does.
#
#   emulated_cluster.sh [--hosts N] [--ranks-per-host R] [--gbps RATE] [--slow-host K]
#       [--slow-gbps RATE] [--sizes MIN:MAX] [--algos A,B,...] [--iters N] [--warmup N]
#       [--out DIR] [--binary PATH] [--mtu BYTES] [--queue-ms MS] [--burst-ms MS]
#       [--timeout S] [--build-wait S] [--tcp-idle-restart 0|1] [--tcp-wmem-max BYTES]
#       [--no-rate-check] [--rate-check-only] [--cleanup]
#
# Defaults: 4 hosts x 2 ranks, 1 Gb/s links with host 3's at 0.5 (--slow-host -1: all alike),
# sizes 1K:4M in x2 steps, algorithms ring,halving_doubling,recursive_doubling,gdraa, -n 5
# -w 1, MTU 1500, tbf bucket 2 ms and queue 50 ms of the rate, out build/emulate/<time>.
# Needs root, iproute2 (ip netns, veth, bridge) and tc's tbf; python3 for the rate check
# (optional). The root namespace is not touched: the switch (a bridge) has its own namespace,
# the veth pairs are made in it, addresses come from 198.18.0.0/15 (RFC 2544).
# Writes DIR/measured.csv (algorithm,bytes,ranks,hosts,ranks_per_host,gbps,slow_host,slow_gbps,
# time_us,busbw_gbs: out-of-place time of one call, the rank mean, as nccl-tests' first column),
# DIR/cluster.json (the cluster, for transport::simulated), DIR/rate_check.csv (TCP throughput
# achieved against the configured cap), each rank's log under DIR/logs and rank 0's -J report
# under DIR/json. --cleanup removes the mmemu-* namespaces (and the processes in them) that
# earlier runs left, keeping those of a run still going, and exits.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

hosts=4
ranks_per_host=2
gbps=1
slow_host=3
slow_gbps=0.5
sizes=1K:4M
algos=ring,halving_doubling,recursive_doubling,gdraa
iters=5
warmup=1
mtu=1500
out=""
binary="$repo/build/default/benchmark/perf/allreduce_perf"
build_wait=1200   # seconds to wait for a build in progress to produce the binary
run_timeout=900   # seconds one algorithm's run may take
queue_ms=50       # tbf queue, in ms of the link's rate
idle_restart=1    # net.ipv4.tcp_slow_start_after_idle in each host (Linux's default: 1)
wmem_max=""       # the most a TCP socket's send buffer grows to in each host (empty: Linux's, 4 MiB)
burst_ms=2        # tbf bucket, in ms of the link's rate
rate_check=1
rate_check_only=0
cleanup_only=0

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "emulated_cluster: $*" >&2; exit 2; }
note() { echo "# $*" >&2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts=${2:?}; shift 2 ;;
    --ranks-per-host) ranks_per_host=${2:?}; shift 2 ;;
    --gbps) gbps=${2:?}; shift 2 ;;
    --slow-host) slow_host=${2:?}; shift 2 ;;
    --slow-gbps) slow_gbps=${2:?}; shift 2 ;;
    --sizes) sizes=${2:?}; shift 2 ;;
    --algos) algos=${2:?}; shift 2 ;;
    -n|--iters) iters=${2:?}; shift 2 ;;
    -w|--warmup) warmup=${2:?}; shift 2 ;;
    --mtu) mtu=${2:?}; shift 2 ;;
    --queue-ms) queue_ms=${2:?}; shift 2 ;;
    --burst-ms) burst_ms=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --binary) binary=${2:?}; shift 2 ;;
    --build-wait) build_wait=${2:?}; shift 2 ;;
    --timeout) run_timeout=${2:?}; shift 2 ;;
    --tcp-idle-restart) idle_restart=${2:?}; shift 2 ;;
    --tcp-wmem-max) wmem_max=${2:?}; shift 2 ;;
    --no-rate-check) rate_check=0; shift ;;
    --rate-check-only) rate_check_only=1; shift ;;
    --cleanup) cleanup_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (--help lists them)" ;;
  esac
done

[ "$(id -u)" = 0 ] || die "needs root (ip netns, tc)"
command -v ip > /dev/null && command -v tc > /dev/null || die "needs iproute2's ip and tc"

# Every namespace this run makes starts with $prefix; --cleanup matches any run's.
prefix="mmemu-$$-"

# Ends the processes inside one namespace (ranks of this or an earlier run), then deletes it.
# Deleting a namespace deletes the veth ends and the bridge in it; the peer end goes with it.
remove_namespace() {
  local ns=$1 pid
  for pid in $(ip netns pids "$ns" 2> /dev/null); do kill -TERM "$pid" 2> /dev/null || true; done
  sleep 0.2
  for pid in $(ip netns pids "$ns" 2> /dev/null); do kill -KILL "$pid" 2> /dev/null || true; done
  ip netns delete "$ns" 2> /dev/null || true
}

if [ "$cleanup_only" = 1 ]; then
  left=$(ip netns list | awk '{print $1}' | grep '^mmemu-' || true)
  for ns in $left; do
    owner=${ns#mmemu-}; owner=${owner%%-*}
    if [[ $owner =~ ^[0-9]+$ ]] && grep -qs emulated_cluster "/proc/$owner/cmdline"; then
      echo "kept namespace $ns: its run (pid $owner) is still going"
      continue
    fi
    remove_namespace "$ns"; echo "removed namespace $ns"
  done
  [ -n "$left" ] || echo "no mmemu-* namespaces left"
  exit 0
fi

# --- arguments ---------------------------------------------------------------------------
is_int() { [[ $1 =~ ^[0-9]+$ ]]; }
is_rate() { [[ $1 =~ ^[0-9]*\.?[0-9]+$ ]] && awk -v r="$1" 'BEGIN { exit !(r >= 0.001 && r <= 100) }'; }
is_int "$hosts" && [ "$hosts" -ge 1 ] && [ "$hosts" -le 250 ] || die "--hosts must be 1..250"
is_int "$ranks_per_host" && [ "$ranks_per_host" -ge 1 ] || die "--ranks-per-host must be >= 1"
is_rate "$gbps" || die "--gbps must be a rate in Gb/s, 0.001..100"
is_rate "$slow_gbps" || die "--slow-gbps must be a rate in Gb/s, 0.001..100"
[[ $slow_host =~ ^-?[0-9]+$ ]] || die "--slow-host must be a host index or -1"
[ "$slow_host" -lt "$hosts" ] || slow_host=-1   # fewer hosts than the default's 4: no slow host
is_int "$iters" && [ "$iters" -ge 1 ] || die "--iters must be >= 1"
is_int "$warmup" || die "--warmup must be >= 0"
is_ms() { [[ $1 =~ ^[0-9]*\.?[0-9]+$ ]] && awk -v t="$1" 'BEGIN { exit !(t <= 10000) }'; }
is_ms "$queue_ms" || die "--queue-ms must be a number of ms, 0..10000"
is_ms "$burst_ms" || die "--burst-ms must be a number of ms, 0..10000"
is_int "$mtu" && [ "$mtu" -ge 576 ] && [ "$mtu" -le 65535 ] || die "--mtu must be 576..65535"
[[ $sizes =~ ^[0-9.]+[KkMmGg]?:[0-9.]+[KkMmGg]?$ ]] || die "--sizes must be MIN:MAX, e.g. 1K:64M"
min_size=${sizes%%:*}
max_size=${sizes##*:}
ranks=$((hosts * ranks_per_host))
[ "$rate_check_only" = 1 ] || [ "$ranks" -ge 2 ] || die "one rank in all: nothing crosses a link"
IFS=, read -r -a algo_list <<< "$algos"
[ -n "$out" ] || out="$repo/build/emulate/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out/logs" "$out/json"
out=$(cd "$out" && pwd)

# Host h's link rate in Gb/s.
host_gbps() { if [ "$1" = "$slow_host" ]; then echo "$slow_gbps"; else echo "$gbps"; fi; }

# --- the binary: a build may be under way ------------------------------------------------
if [ ! -x "$binary" ]; then
  note "waiting up to ${build_wait}s for $binary (a build in progress?)"
  waited=0
  while [ ! -x "$binary" ] && [ "$waited" -lt "$build_wait" ]; do sleep 10; waited=$((waited + 10)); done
  [ -x "$binary" ] || die "no $binary; build it with: nice cmake --build build/default --target allreduce_perf -j1"
  sleep 5  # the linker may still be writing it
fi

# --- cleanup on every way out ------------------------------------------------------------
namespaces=()   # what this run made, deleted on exit
rank_pids=()    # the ranks of the algorithm running now
cleanup() {
  local pid ns
  for pid in "${rank_pids[@]}"; do kill -TERM "$pid" 2> /dev/null || true; done
  for ns in "${namespaces[@]}"; do remove_namespace "$ns"; done
  namespaces=()
}
trap 'cleanup' EXIT
trap 'note "interrupted"; exit 130' INT
trap 'note "terminated"; exit 143' TERM

# --- the cluster -------------------------------------------------------------------------
# One switch namespace holding a bridge; per host a namespace whose eth0 is one end of a veth
# pair, the other end (h<i>) a port of the bridge. Both ends are made inside the switch
# namespace and one is moved out, so the root namespace never holds either.
#
#   host0 [eth0 198.18.0.1]--veth--[h0]\
#   host1 [eth0 198.18.0.2]--veth--[h1]-- br0 (namespace <prefix>sw)
#   ...                                 /
#   tbf on eth0 (host -> switch) and on h<i> (switch -> host) caps both directions.
switch_ns="${prefix}sw"
host_ns() { echo "${prefix}h$1"; }
host_addr() { echo "198.18.$(($1 / 250)).$(($1 % 250 + 1))"; }

# tbf for a rate: bucket = max(2 x 64 KiB GSO frame, --burst-ms of the rate), so a late qdisc
# timer (2 busy cores) loses no tokens and a whole GSO frame always fits; queue = max(256 KiB,
# --queue-ms of the rate) beyond the bucket, deep enough that TCP is paced rather than dropped
# (incast into one host still drops; a drop can cost a 200 ms retransmission timeout).
tbf_args() {
  awk -v g="$1" -v q="$queue_ms" -v b="$burst_ms" 'BEGIN {
    rate = g * 1e9; bytes = rate / 8
    burst = bytes * b / 1000; if (burst < 131072) burst = 131072
    limit = bytes * q / 1000; if (limit < 262144) limit = 262144
    printf "rate %.0fbit burst %.0f limit %.0f\n", rate, burst, burst + limit }'
}

make_cluster() {
  ip netns add "$switch_ns"; namespaces+=("$switch_ns")
  ip -n "$switch_ns" link set lo up
  ip -n "$switch_ns" link add br0 type bridge
  ip -n "$switch_ns" link set br0 up
  local h ns rate
  for ((h = 0; h < hosts; h++)); do
    ns=$(host_ns "$h")
    ip netns add "$ns"; namespaces+=("$ns")
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_slow_start_after_idle="$idle_restart"
    [ -z "$wmem_max" ] || ip netns exec "$ns" sysctl -qw net.ipv4.tcp_wmem="4096 16384 $wmem_max"
    ip -n "$switch_ns" link add "h$h" mtu "$mtu" type veth peer name eth0 mtu "$mtu" netns "$ns"
    ip -n "$switch_ns" link set "h$h" master br0 up
    ip -n "$ns" addr add "$(host_addr "$h")/15" dev eth0
    ip -n "$ns" link set eth0 up
    rate=$(host_gbps "$h")
    # shellcheck disable=SC2046  # tbf_args is words by design
    tc -n "$ns" qdisc replace dev eth0 root tbf $(tbf_args "$rate")
    # shellcheck disable=SC2046
    tc -n "$switch_ns" qdisc replace dev "h$h" root tbf $(tbf_args "$rate")
  done
}

# Bytes dropped by the tbf caps so far, over both ends of every link.
tbf_drops() {
  local h total=0 d
  for ((h = 0; h < hosts; h++)); do
    for d in $(tc -n "$(host_ns "$h")" -s qdisc show dev eth0 | awk '/dropped/ { sub(",", "", $7); print $7 }') \
             $(tc -n "$switch_ns" -s qdisc show dev "h$h" | awk '/dropped/ { sub(",", "", $7); print $7 }'); do
      total=$((total + d))
    done
  done
  echo "$total"
}

# --- rate check --------------------------------------------------------------------------
# One TCP stream from host $1 to host $2 for $3 seconds, payload bytes over time at the
# receiver (python3), in Gb/s; empty when python3 is missing.
tcp_stream_gbps() {
  local from=$1 to=$2 seconds=$3 port=$((20000 + RANDOM % 10000))
  command -v python3 > /dev/null || return 0
  ip netns exec "$(host_ns "$to")" python3 - "$port" "$seconds" "$(host_addr "$to")" > "$out/logs/stream.$from-$to.txt" 2>&1 <<'PY' &
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[3], int(sys.argv[1]))); s.listen(1); s.settimeout(30)  # the host's address alone
c, _ = s.accept(); buf = bytearray(1 << 20); n = 0; start = None; skip = 0.25
while True:
    k = c.recv_into(buf)
    if not k: break
    now = time.monotonic()
    if start is None: t0 = now; start = now + skip  # the first 250 ms carry the burst: skip them
    elif now >= start: n += k; last = now
print("%.4f" % (n * 8 / (last - start) / 1e9))
PY
  local receiver=$!
  sleep 0.5
  ip netns exec "$(host_ns "$from")" python3 - "$(host_addr "$to")" "$port" "$seconds" <<'PY' || true
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
data = b"\0" * (1 << 20); end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end: c.sendall(data)
c.close()
PY
  wait "$receiver" || true
  tail -n 1 "$out/logs/stream.$from-$to.txt"
}

# allreduce_perf with one rank on host $1 and one on host $2 at one size, as Gb/s of busbw:
# for 2 ranks that is what one direction of the link carried (payload).
pair_gbps() {
  local a=$1 b=$2 bytes=$3 log="$out/logs/pair.$1-$2" port=$((29400 + RANDOM % 100)) r pids=()
  for r in 0 1; do
    local h=$a; [ "$r" = 0 ] || h=$b
    ip netns exec "$(host_ns "$h")" env RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
      MASTER_ADDR="$(host_addr "$a")" MASTER_PORT=$port FI_TCP_IFACE=eth0 \
      timeout 300 "$binary" --provider 'tcp;ofi_rxm' --algo ring -b "$bytes" -e "$bytes" -n 2 -w 1 -c 0 \
      > "$log.rank$r.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  awk '!/^#/ && NF >= 12 { printf "%.4f\n", $1 * 8 / ($6 * 1000); exit }' "$log.rank0.log"
}

rate_check_run() {
  [ "$hosts" -ge 2 ] || { note "rate check needs 2 hosts"; return 0; }
  local csv="$out/rate_check.csv" to g bytes tcp pair busy
  busy=$(busy_percent)
  echo "from,to,configured_gbps,tcp_stream_gbps,tcp_ratio,allreduce_2rank_gbps,allreduce_ratio" > "$csv"
  local targets=1
  [ "$slow_host" -gt 1 ] && targets="1 $slow_host"
  for to in $targets; do
    g=$(awk -v a="$(host_gbps 0)" -v b="$(host_gbps "$to")" 'BEGIN { print (a < b ? a : b) }')
    tcp=$(tcp_stream_gbps 0 "$to" 3)
    # About 1 s of the link, a power of two.
    bytes=$(awk -v g="$g" 'BEGIN { b = 1048576; while (b * 2 <= g * 1e9 / 8 && b < 1073741824) b *= 2; print b }')
    pair=$(pair_gbps 0 "$to" "$bytes")
    echo "0,$to,$g,${tcp:-},$(awk -v m="${tcp:-0}" -v g="$g" 'BEGIN { printf "%.3f", m / g }'),${pair:-},$(awk -v m="${pair:-0}" -v g="$g" 'BEGIN { printf "%.3f", m / g }')" >> "$csv"
  done
  note "rate check (Gb/s of TCP payload; an MTU of $mtu carries at most $(awk -v m="$mtu" 'BEGIN { printf "%.3f", (m - 52) / (m + 14) }') of the link rate; the cores were ${busy}% busy before):"
  column -s, -t < "$csv" | sed 's/^/#   /' >&2
}

# How busy the machine's cores are over one second, in percent. The ranks busy-poll, so the
# cores are always busy while they run; this, taken before they start, says whether something
# else competed for them.
busy_percent() {
  local a b
  a=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat)
  sleep 1
  b=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " "); busy = y[1] - x[1]; idle = y[2] - x[2];
    printf "%.0f\n", (busy + idle > 0) ? 100 * busy / (busy + idle) : 0 }'
}

# --- runs ---------------------------------------------------------------------------------
# All ranks of one algorithm, each in its host's namespace; rank 0 prints and writes the JSON.
run_algorithm() {
  local algo=$1 port=$2 r h log
  rank_pids=()
  for ((r = 0; r < ranks; r++)); do
    h=$((r / ranks_per_host))
    log="$out/logs/$algo.rank$r.log"
    local report=()
    [ "$r" = 0 ] && report=(-J "$out/json/$algo.json")
    ip netns exec "$(host_ns "$h")" env RANK=$r WORLD_SIZE=$ranks LOCAL_RANK=$((r % ranks_per_host)) \
      LOCAL_WORLD_SIZE=$ranks_per_host MASTER_ADDR="$(host_addr 0)" MASTER_PORT="$port" FI_TCP_IFACE=eth0 \
      timeout --kill-after=10 "$run_timeout" "$binary" --provider 'tcp;ofi_rxm' --algo "$algo" \
      -b "$min_size" -e "$max_size" -f 2 -n "$iters" -w "$warmup" -c 1 "${report[@]}" > "$log" 2>&1 &
    rank_pids+=($!)
  done
  local status=0 pid
  for pid in "${rank_pids[@]}"; do wait "$pid" || status=$?; done
  rank_pids=()
  return "$status"
}

# Rank 0's results as CSV rows: from its -J report (full precision) with python3, else from
# its nccl-tests table (size count type redop root time algbw busbw #wrong ...), whose times
# of 10 s and more have two digits. busbw is recomputed from the time: the table's has two
# decimals, too few below 1 GB/s.
results_to_csv() {
  local algo=$1 json=$2 log=$3 fixed="$ranks,$hosts,$ranks_per_host,$gbps,$slow_host,$slow_gbps"
  if command -v python3 > /dev/null && [ -s "$json" ]; then
    python3 - "$json" "$algo" "$fixed" "$ranks" <<'PY'
import json, sys
report, algo, fixed, n = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], int(sys.argv[4])
for r in report["results"]:
    o, i = r["out_of_place"], r["in_place"]
    if o["nwrong"] or i["nwrong"]:
        print("# %s %d B: %s/%s wrong elements" % (algo, r["size"], o["nwrong"], i["nwrong"]), file=sys.stderr)
    t = o["time"]
    print("%s,%d,%s,%.3f,%.6f" % (algo, r["size"], fixed, t, r["size"] / (t * 1e3) * 2 * (n - 1) / n if t > 0 else 0))
PY
    return
  fi
  awk -v algo="$algo" -v fixed="$fixed" -v n="$ranks" '
    !/^#/ && NF >= 13 && $1 ~ /^[0-9]+$/ {
      if ($9 != 0 || $13 != 0) printf "# %s %s B: %s/%s wrong elements\n", algo, $1, $9, $13 > "/dev/stderr"
      printf "%s,%s,%s,%s,%.6f\n", algo, $1, fixed, $6, ($6 > 0) ? $1 / ($6 * 1000) * 2 * (n - 1) / n : 0
    }' "$log"
}

# "64M" as bytes, powers of 1024 as allreduce_perf reads them.
size_bytes() {
  awk -v s="$1" 'BEGIN { n = s + 0; u = toupper(substr(s, length(s)));
    if (u == "K") n *= 1024; else if (u == "M") n *= 1048576; else if (u == "G") n *= 1073741824;
    printf "%d\n", n }'
}

write_cluster_json() {
  local h sep="" rates="" rank_host="" r
  for ((h = 0; h < hosts; h++)); do rates+="$sep$(host_gbps "$h")"; sep=", "; done
  sep=""
  for ((r = 0; r < ranks; r++)); do rank_host+="$sep$((r / ranks_per_host))"; sep=", "; done
  local algo_json
  algo_json=$(printf '"%s", ' "${algo_list[@]}"); algo_json="[${algo_json%, }]"
  cat > "$out/cluster.json" << EOF
{
  "description": "emulated cluster: one Linux network namespace a host, a veth link from each to one bridge (a non-blocking switch); each link capped in both directions with tc tbf; no delay emulation",
  "hosts": $hosts,
  "ranks_per_host": $ranks_per_host,
  "ranks": $ranks,
  "rank_host": [$rank_host],
  "host_gbps": [$rates],
  "gbps": $gbps,
  "slow_host": $slow_host,
  "slow_gbps": $slow_gbps,
  "latency_us": 0,
  "mtu": $mtu,
  "payload_fraction": $(awk -v m="$mtu" 'BEGIN { printf "%.4f", (m - 52) / (m + 14) }'),
  "intra_host": "loopback TCP inside the host's namespace, not rate-capped",
  "tbf": {"burst_ms": $burst_ms, "queue_ms": $queue_ms, "min_burst_bytes": 131072, "min_queue_bytes": 262144},
  "provider": "tcp;ofi_rxm",
  "algorithms": $algo_json,
  "min_bytes": $(size_bytes "$min_size"),
  "max_bytes": $(size_bytes "$max_size"),
  "step_factor": 2,
  "iters": $iters,
  "warmup_iters": $warmup,
  "datatype": "float",
  "redop": "sum",
  "cpu_cores": $(nproc),
  "time": "out-of-place, mean over ranks (allreduce_perf -a 1)"
}
EOF
}

make_cluster
note "cluster: $hosts hosts x $ranks_per_host ranks, $gbps Gb/s links$([ "$slow_host" -ge 0 ] && echo ", host $slow_host at $slow_gbps Gb/s"), namespaces ${prefix}*"
write_cluster_json
[ "$rate_check" = 1 ] && rate_check_run
[ "$rate_check_only" = 1 ] && exit 0

csv="$out/measured.csv"
echo "algorithm,bytes,ranks,hosts,ranks_per_host,gbps,slow_host,slow_gbps,time_us,busbw_gbs" > "$csv"
failed=0
i=0
for algo in "${algo_list[@]}"; do
  others=$(busy_percent)
  drops_before=$(tbf_drops)
  start=$(date +%s.%N)
  if run_algorithm "$algo" $((29500 + i)); then
    results_to_csv "$algo" "$out/json/$algo.json" "$out/logs/$algo.rank0.log" >> "$csv"
  else
    note "$algo failed (exit $?): see $out/logs/$algo.rank*.log"
    failed=1
  fi
  note "$algo: $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s; the cores were ${others}% busy in the second before; tbf dropped $(( $(tbf_drops) - drops_before )) packets"
  i=$((i + 1))
done

column -s, -t < "$csv"

# --- hook: the simulator's prediction of the same runs -------------------------------------
# predict_emulated (benchmark/scale, transport::simulated) reads cluster.json and measured.csv
# and writes a markdown comparison. Skipped until that program is built.
predict="$repo/build/default/benchmark/scale/predict_emulated"
if [ -x "$predict" ]; then
  if "$predict" "$out/cluster.json" "$csv" > "$out/comparison.md"; then
    note "comparison: $out/comparison.md"
  else
    note "predict_emulated failed; see $out/comparison.md"
  fi
else
  note "skipped the simulator's comparison: no $predict"
fi
note "results in $out"
exit "$failed"
