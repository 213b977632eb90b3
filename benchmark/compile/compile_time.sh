#!/usr/bin/env bash
# Compile time of the issue 10 units (typed.cpp, runtime.cpp) header-only and with
# separate compilation, typed.cpp's call through the umbrella header (umbrella.cpp,
# separate), beside the standard library alone (std.cpp) and the library unit itself
# (impl/src.hpp, compiled once), as a Markdown table of medians.
#
#   benchmark/compile/compile_time.sh [-n runs] [label=include_dir ...]
#
# Each tree (default: this checkout's include/) is measured in the same run, the runs
# interleaved (every unit of every tree once, then again), since this VM's speed drifts
# by 2x over hours. CXX (default g++-12) and CXXFLAGS (default -O2) as usual; libfabric's
# headers must be on the include path. Wall time of `$CXX -std=c++20 $CXXFLAGS -c`, and
# in parentheses its CPU time (user + system), which other jobs on the machine disturb less.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
runs=3
if [[ ${1:-} == -n ]]; then runs=$2; shift 2; fi
trees=("$@")
((${#trees[@]})) || trees=("this tree=$here/../../include")
cxx=${CXX:-g++-12}
read -r -a flags <<<"${CXXFLAGS:--O2}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '#include "mimatrix/impl/src.hpp"\n' >"$work/src.cpp"

# rows: "name|source|defines"; the library row is separate compilation by definition.
rows=("std.cpp (standard library alone)|$here/std.cpp|"
      "typed.cpp header-only|$here/typed.cpp|"
      "typed.cpp separate|$here/typed.cpp|-DMIMATRIX_SEPARATE_COMPILATION"
      "umbrella.cpp separate (typed.cpp through mimatrix.hpp)|$here/umbrella.cpp|-DMIMATRIX_SEPARATE_COMPILATION"
      "runtime.cpp header-only|$here/runtime.cpp|"
      "runtime.cpp separate|$here/runtime.cpp|-DMIMATRIX_SEPARATE_COMPILATION"
      "impl/src.hpp (mimatrix::compiled, once)|$work/src.cpp|-DMIMATRIX_SEPARATE_COMPILATION")
declare -A times cpu
for ((run = 0; run < runs; ++run)); do
  for t in "${!trees[@]}"; do
    dir=${trees[$t]#*=}
    for r in "${!rows[@]}"; do
      IFS='|' read -r _ source defines <<<"${rows[$r]}"
      /usr/bin/time -f '%e %U %S' -o "$work/time" \
        "$cxx" -std=c++20 "${flags[@]}" -I"$dir" -DMIMATRIX_WITH_FABRIC=1 $defines -c "$source" -o "$work/out.o"
      read -r wall user sys <"$work/time"
      times[$t,$r]+="$wall "
      cpu[$t,$r]+="$(echo "$user + $sys" | bc) "
    done
  done
done

median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
printf '| unit |'
for t in "${!trees[@]}"; do printf ' %s |' "${trees[$t]%%=*}"; done
printf '\n| --- |'
for _ in "${trees[@]}"; do printf ' --- |'; done
printf '\n'
for r in "${!rows[@]}"; do
  printf '| %s |' "${rows[$r]%%|*}"
  for t in "${!trees[@]}"; do
    printf ' %.1f s (%.1f) |' "$(median "${times[$t,$r]}")" "$(median "${cpu[$t,$r]}")"
  done
  printf '\n'
done
echo "($cxx ${flags[*]}; wall time (CPU time), median of $runs interleaved runs)"
