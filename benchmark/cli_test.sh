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
  timeout 30 "${bin[$1]}" --help >"$log" 2>&1 && grep -q "usage" "$log" || { echo "FAIL: $1 --help"; cat "$log"; failed=1; }
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
if [[ -v bin[quickstart] ]]; then
  refuses quickstart "ranks must be in [1, 256], not -1" -1
  refuses quickstart "max_bytes takes a size such as 4096, 64K or 64M" 4 1.5M
fi
((failed == 0)) && echo "PASS: ${#bin[@]} programs refuse bad command lines with exit 2, naming the flag"
exit $failed
