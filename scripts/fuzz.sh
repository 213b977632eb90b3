#!/usr/bin/env bash
# Fuzzes the job server's wire protocol (examples/01_job_server/fuzz/) with libFuzzer:
# configures build/fuzz with clang-16 (the `clang` preset's settings), builds only
# job_protocol_fuzz, and runs it on a copy of the seed corpus.
#
#   scripts/fuzz.sh [seconds] [libFuzzer flag...]      default: 60 seconds
#
# What it finds stays in build/fuzz/protocol_fuzz_corpus (reused by the next run); a crash
# is written to build/fuzz/protocol_fuzz_crash-*. Exits with the fuzzer's status.
# MIMATRIX_JOBS sets build parallelism (default 2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=${1:-60}
(($# > 0)) && shift
build=build/fuzz

# libFuzzer and clang 16's sanitizer runtimes are in libclang-rt-16-dev, not in clang-16.
scripts/setup-debian.sh clang-16 libclang-rt-16-dev >/dev/null
# The clang preset (CMakePresets.json) plus the fuzz option; tests on for the ctest entry.
CC=clang-16 CXX=clang++-16 nice cmake -S . -B "$build" -G Ninja \
  -DCMAKE_CXX_COMPILER=clang++-16 \
  -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DMIMATRIX_WARNINGS_AS_ERRORS=ON \
  -DMIMATRIX_ENABLE_CUDA=OFF \
  -DMIMATRIX_BUILD_BENCHMARKS=OFF \
  -DMIMATRIX_BUILD_TESTS=ON \
  -DMIMATRIX_FUZZ=ON >/dev/null
nice cmake --build "$build" --parallel "${MIMATRIX_JOBS:-2}" --target job_protocol_fuzz

# libFuzzer writes new inputs into its first directory: a copy, so the seeds stay as committed.
corpus=$build/protocol_fuzz_corpus
mkdir -p "$corpus"
cp -r examples/01_job_server/fuzz/corpus/. "$corpus/"
# Clang 16's runtime looks for llvm-16's symbolizer, which clang-16 does not install.
symbolizer=$(command -v llvm-symbolizer-16 || command -v llvm-symbolizer || true)
[[ -n $symbolizer ]] && export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$symbolizer}
exec "$build/examples/01_job_server/job_protocol_fuzz" -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=1024 \
  -artifact_prefix="$build/protocol_fuzz_" -print_final_stats=1 "$@" "$corpus"
