#!/usr/bin/env bash
# Regenerates every scale study's table and plot into docs/results/scaling/ (one command):
#   benchmark/scale/run_studies.sh [--quick] [study ...]
# Builds scale_studies in build/default if needed; plots need gnuplot (Debian: gnuplot-nox).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=docs/results/scaling
mkdir -p "$out"
cmake --preset default -DMIMATRIX_PROGRAM_OPTIMIZATION= >/dev/null  # not a quick test run's -O1
cmake --build build/default --target scale_studies >/dev/null
build/default/benchmark/scale/scale_studies --out "$out" "$@" | tee "$out/tables.md"
missing=$(for f in nic topology gdraa resnet; do [[ -f $out/$f.dat ]] || echo "$f"; done)
if [[ -n $missing ]]; then
  echo "run_studies: no plots: no data yet for $missing" >&2
elif command -v gnuplot >/dev/null; then
  gnuplot -e "dir='$out'" benchmark/scale/plots.gnuplot
  echo "run_studies: plots in $out/*.png"
else
  echo "run_studies: gnuplot not found (apt-get install gnuplot-nox); tables only" >&2
fi
