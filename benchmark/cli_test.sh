#!/usr/bin/env bash
# The benchmarks' and quickstart's command lines as a user meets them: a bad number, an
# unknown option or a missing directory ends at once with exit 2 and a message naming it
# (before: `overlap_perf -n 0` terminated, `quickstart -1` aborted, `scale_studies --out`
# to a missing directory wrote nothing and exited 0); --help exits 0.
#
#   benchmark/cli_test.sh NAME=PATH ...   (the binaries this build has)
set -u
declare -A bin
for a in "$@"; do bin[${a%%=*}]=${a#*=}; done
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# refuses NAME "EXPECTED TEXT" ARGS...: exit 2 and EXPECTED TEXT on stderr or stdout.
refuses() {
  local name=$1 want=$2
  shift 2
  timeout 30 "${bin[$name]}" "$@" >"$log" 2>&1
  local rc=$?
  if [[ $rc != 2 ]] || ! grep -qF -- "$want" "$log"; then
    echo "FAIL: $name $*: exit $rc (want 2), output:"
    cat "$log"
    echo "  (wanted: $want)"
    failed=1
  fi
}
helps() {
  timeout 30 "${bin[$1]}" --help >"$log" 2>&1 && grep -qi "usage" "$log" || { echo "FAIL: $1 --help"; cat "$log"; failed=1; }
}

for name in "${!bin[@]}"; do helps "$name"; done
if [[ -v bin[overlap_perf] ]]; then
  refuses overlap_perf "-n must be in [1, 1024], not 0" -n 0
  refuses overlap_perf "--iters takes an integer, not '12x'" --iters 12x
  refuses overlap_perf "unknown option --bogus" --bogus
  refuses overlap_perf "--transport must be inproc or fabric" --transport carrier-pigeon
fi
if [[ -v bin[job_server_bench] ]]; then
  refuses job_server_bench "workers must be in [1, 65536], not 0" 0
  refuses job_server_bench "at most three arguments" 1 2 3 4
fi
if [[ -v bin[scale_studies] ]]; then
  refuses scale_studies "is not an existing directory" --out /nonexistent/dir
  refuses scale_studies "unknown study 'warp'" --quick warp
fi
if [[ -v bin[sufficient_factor_bench] ]]; then
  refuses sufficient_factor_bench "takes no arguments, not '8'" 8
fi
if [[ -v bin[allreduce_perf] ]]; then
  refuses allreduce_perf "expected a size such as 8, 64K, 32M or 1G, below 8E bytes" -e 1e30
  refuses allreduce_perf "expected a size such as 8, 64K, 32M or 1G, below 8E bytes" -b nan
  refuses allreduce_perf "minbytes 0 with stepfactor 2 stays 0" -b 0 -e 64 -f 2
  refuses allreduce_perf "invalid value '2' for --blocking: expected 0 or 1" -z 2
  refuses allreduce_perf "--algo bogus: these programs run ring, recursive_doubling, halving_doubling, gdraa" --algo bogus
  # Checked before the sweep, on every rank alike (nccl-tests: after it, exit 0).
  refuses allreduce_perf "-J /nonexistent/x.json: cannot write there" --ranks 2 -b 8 -e 8 -n 1 -W 0 -J /nonexistent/x.json
  # Buffers for the largest size first, as nccl-tests makes them: no 4 EB anywhere.
  refuses allreduce_perf "rank 1: no buffers for the largest size, 4000000000000000000 bytes" --ranks 2 -b 4e18 -e 4e18
  if [[ -v bin[mimatrix-run] ]]; then
    refuses mimatrix-run "--ranks 4, but the launcher started 2 ranks" -n 2 "${bin[allreduce_perf]}" --ranks 4 -b 8 -e 8
    # A root of its own on each rank: over tcp, small broadcasts moved no data and each
    # rank checked its own as right (a black-box test).
    refuses mimatrix-run "rank 1 was given -r 1, rank 0 -r 0: every rank must be given the same flags" \
      -n 2 -x MIMATRIX_PROVIDER="tcp;ofi_rxm" bash -c "exec ${bin[broadcast_perf]} -b 1K -e 1K -n 1 -w 0 -W 0 -r \$RANK"
    refuses mimatrix-run "rank 1 was given another --algo than rank 0's ('ring')" \
      -n 2 bash -c "exec ${bin[allreduce_perf]} -b 1K -e 1K -n 1 -w 0 -W 0 --algo \$( ((RANK)) && echo gdraa || echo ring)"
  fi
fi
if [[ -v bin[alltoallv_perf] ]]; then
  # --skew: a number >= 0 for the v-forms, refused (not ignored) by the others, the same on
  # every rank.
  refuses alltoallv_perf "invalid value '-1' for --skew: expected a number from 0 to 1e6" --skew -1
  refuses alltoallv_perf "invalid value '1x' for --skew: expected a number from 0 to 1e6" --skew 1x
  if [[ -v bin[allreduce_perf] ]]; then
    refuses allreduce_perf "--skew 1: allreduce has even blocks (the v-forms, alltoallv and allgatherv, take it)" \
      --ranks 2 --skew 1 -b 8 -e 8 -n 1 -W 0
  fi
  if [[ -v bin[mimatrix-run] ]]; then
    refuses mimatrix-run "rank 1 was given --skew 1, rank 0 --skew 0: every rank must be given the same flags" \
      -n 2 bash -c "exec ${bin[alltoallv_perf]} -b 1K -e 1K -n 1 -w 0 -W 0 --skew \$RANK"
  fi
fi
if [[ -v bin[gather_perf] ]]; then
  # A root outside the group, refused by every rank alike before any call (reduce, gather
  # and scatter have roots as broadcast has).
  refuses gather_perf "root 2 is not a rank of 2" --ranks 2 -r 2 -b 8 -e 8 -n 1 -W 0
fi
if [[ -v bin[quickstart] ]]; then
  refuses quickstart "ranks must be in [1, 256], not -1" -1
  refuses quickstart "max_bytes takes a size such as 4096, 64K or 64M" 4 1.5M
fi
((failed == 0)) && echo "PASS: ${#bin[@]} programs refuse bad command lines with exit 2, naming the flag"
exit $failed
