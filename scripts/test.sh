#!/usr/bin/env bash
# The whole test suite, as CI runs it: install build dependencies, then configure, build
# and test each preset in turn (default, clang, asan-ubsan, tsan).
#
#   scripts/test.sh [--all] [preset...]
#
# Without --all, the quick tier (what CI runs, at most 25 minutes on 2 cores): the default
# build's tests, a clang build of every header, the examples and a few tests (the rest
# with --all), and a subset under the sanitizers that reaches every execution path. --all builds and runs the long tier too:
# the full numeric grids and the sanitizers over every unit test (test/CMakeLists.txt).
#
# MIMATRIX_JOBS sets build parallelism (default 2). Build directories (build/<preset>; the quick
# tier builds the default preset in build/quick, apart from the quick start's build/default) are
# reused, so a second run rebuilds only what changed. Exits non-zero on the first failure.
# Prints each stage's time, then every preset's ctest summary; the last line is their total.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${MIMATRIX_JOBS:-2}
long=OFF
presets=()
for arg in "$@"; do
  case $arg in
    --all) long=ON ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "test.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) presets+=("$arg") ;;
  esac
done
((${#presets[@]})) || presets=(default clang asan-ubsan tsan)

stage=""
stage_started=$SECONDS
started=$SECONDS
times=()
summaries=()
total_tests=0
total_failed=0
end_stage() {
  [[ -n $stage ]] && times+=("$(printf '%6ds  %s' $((SECONDS - stage_started)) "$stage")")
  stage=""
}
begin() {
  end_stage
  stage=$1
  stage_started=$SECONDS
  printf '\n==> [%s] %s  (%ds elapsed)\n' "$(date +%H:%M:%S)" "$stage" $((SECONDS - started))
}
trap 'rc=$?; ((rc == 0)) || printf "\n==> FAILED (exit %d) in stage: %s\n" "$rc" "$stage" >&2' EXIT

# Sanitizer runtimes of older compilers (g++ 12's among them) cannot run with the
# high-entropy ASLR of newer kernels (vm.mmap_rnd_bits = 32): TSan stops with "FATAL:
# ThreadSanitizer: unexpected memory mapping", ASan can loop on DEADLYSIGNAL. Compile a
# small threaded program with the preset's compiler and flags; if it runs only without
# address randomization, run that preset's tests under `setarch <arch> -R`.
runner=()
probe_sanitizer() {  # probe_sanitizer <build dir> <sanitizers>
  local dir=$1 sanitize=$2 cxx out
  cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$dir/CMakeCache.txt")
  mkdir -p "$dir/sanitizer-probe"
  cat >"$dir/sanitizer-probe/probe.cpp" <<'CPP'
#include <mutex>
#include <thread>
#include <vector>
int main() {
  std::mutex m;
  std::vector<int> v;
  std::thread t([&] { std::lock_guard<std::mutex> g(m); v.push_back(1); });
  { std::lock_guard<std::mutex> g(m); v.push_back(2); }
  t.join();
  return v.size() == 2 ? 0 : 1;
}
CPP
  "$cxx" -std=c++20 -g -fsanitize="$sanitize" -pthread "$dir/sanitizer-probe/probe.cpp" \
    -o "$dir/sanitizer-probe/probe"
  runner=()
  if out=$(timeout 60 "$dir/sanitizer-probe/probe" 2>&1); then
    echo "sanitizer probe ($sanitize): runs as is"
    return 0
  fi
  echo "sanitizer probe ($sanitize) failed:"
  printf '%s\n' "$out" | head -n 5
  if timeout 60 setarch "$(uname -m)" -R "$dir/sanitizer-probe/probe" >/dev/null 2>&1; then
    echo "sanitizer probe ($sanitize): runs without ASLR; tests run under setarch $(uname -m) -R" \
         "(vm.mmap_rnd_bits = $(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo '?'))"
    runner=(setarch "$(uname -m)" -R)
    return 0
  fi
  echo "sanitizer probe ($sanitize): fails with and without ASLR; cannot run these tests" >&2
  return 1
}

# The quick tier's clang build: every header (all in one unit, header-only and separately
# compiled; g++ builds each alone), the examples, and what instantiates every collective
# over every transport (typed and runtime-typed).
clang_quick_targets=(mimatrix_all_headers_check mimatrix_all_headers_check_separate quickstart readme_example framework_example
  mimatrix-run
  collective_allreduce_test collective_collectives_test collective_every_algorithm_test
  transport_progress_test integration_collectives_test)

begin "setup: scripts/setup-debian.sh"
# Chromium (400 MB with what it pulls in) only renders the job server's status page in a
# long-tier test.
extra_packages=(clang-16)
[[ $long == ON ]] && extra_packages+=(chromium)
scripts/setup-debian.sh "${extra_packages[@]}"

for preset in "${presets[@]}"; do
  # The quick tier builds its programs at -O1: in build/quick, so that the quick start's
  # -O2 build/default and this one never rebuild each other's programs.
  [[ $preset == default && $long == OFF ]] && preset=quick
  begin "$preset: configure"
  # The clang quick stage builds a few tests, one binary a file (MIMATRIX_TEST_UNITY=OFF):
  # a folder's one unit would compile all of that folder's tests.
  unity=ON
  [[ $preset == clang && $long == OFF ]] && unity=OFF
  # No GPU runs the quick tier's CUDA code: the trainer's layers are compiled to PTX for
  # one architecture only (16 s less a unit, as the test units already are); the library's
  # kernels still go through ptxas for every architecture (mimatrix_reduce_cuda_instantiate).
  # --all restores the defaults in a build directory a quick run configured.
  if [[ $long == OFF ]]; then
    cuda_archs=(-DCMAKE_CUDA_ARCHITECTURES=80-virtual "-DMIMATRIX_CUDA_ARCHITECTURES=80;90")
  else
    cuda_archs=("-DCMAKE_CUDA_ARCHITECTURES=80;90" -UMIMATRIX_CUDA_ARCHITECTURES)
  fi
  # The quick tier runs the examples and benchmarks for correctness only: at -O1 (a third
  # less of their build; -O2's own warnings are then the long tier's and the quick start's).
  program_optimization=-O1
  [[ $long == ON ]] && program_optimization=
  cmake --preset "$preset" -DMIMATRIX_LONG_TESTS=$long -DMIMATRIX_GPU_PROGRAMS=$long -DMIMATRIX_TEST_UNITY=$unity \
    -DMIMATRIX_PROGRAM_OPTIMIZATION=$program_optimization \
    "${cuda_archs[@]}"

  # The clang build proves that users' other compiler takes every header (each on its
  # own), the examples, and the tests that instantiate every collective, transport and
  # dtype; the rest of its tests add little to g++'s in the quick tier, so they are built
  # and run with --all.
  begin "$preset: build (-j$jobs)"
  if [[ $preset == clang && $long == OFF ]]; then
    cmake --build --preset "$preset" --parallel "$jobs" --target "${clang_quick_targets[@]}"
    summaries+=("$preset: built ${#clang_quick_targets[@]} targets; the rest, and its tests, with --all")
    continue
  fi
  cmake --build --preset "$preset" --parallel "$jobs"

  runner=()
  case $preset in
    asan-ubsan)
      begin "$preset: sanitizer probe"
      probe_sanitizer "build/$preset" address,undefined ;;
    tsan)
      begin "$preset: sanitizer probe"
      probe_sanitizer "build/$preset" thread ;;
  esac

  begin "$preset: test"
  log="build/$preset/ctest.log"
  "${runner[@]}" ctest --preset "$preset" 2>&1 | tee "$log"
  summary=$(grep -E '^[0-9]+% tests passed' "$log" | tail -n 1)
  summaries+=("$preset: $summary")
  if [[ $summary =~ ([0-9]+)\ tests\ failed\ out\ of\ ([0-9]+) ]]; then
    total_failed=$((total_failed + BASH_REMATCH[1]))
    total_tests=$((total_tests + BASH_REMATCH[2]))
  fi
done

# The job server's wire protocol under libFuzzer (ASan + UBSan), for a bounded time, from
# the seed corpus kept in the repository (examples/01_job_server/fuzz/).
if [[ " ${presets[*]} " == *" clang "* ]]; then
  seconds=$([[ $long == ON ]] && echo 300 || echo 10)
  begin "fuzz: the job server's protocol (${seconds}s)"
  scripts/fuzz.sh "$seconds" 2>&1 | tail -n 12
  summaries+=("fuzz: job server protocol, ${seconds}s without a finding")
fi
end_stage

stage="done"
printf '\n==> stage times (%ds in all)\n' $((SECONDS - started))
printf '%s\n' "${times[@]}"
printf '\n==> every preset passed: %s (tier: %s)\n' "${presets[*]}" "$([[ $long == ON ]] && echo 'quick and long' || echo quick)"
printf '%s\n' "${summaries[@]}"
printf '%d%% tests passed, %d tests failed out of %d\n' \
  $(( total_tests ? 100 * (total_tests - total_failed) / total_tests : 100 )) "$total_failed" "$total_tests"
