#!/usr/bin/env bash
# The whole test suite, as CI runs it: install build dependencies, then configure, build
# and test the `default` preset, then the sanitizer presets `asan-ubsan` and `tsan`.
#
#   scripts/test.sh [preset...]     presets default to: default asan-ubsan tsan
#
# MIMATRIX_JOBS sets build parallelism (default 2). Build directories (build/<preset>) are
# reused, so a second run rebuilds only what changed. Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${MIMATRIX_JOBS:-2}
presets=("$@")
((${#presets[@]})) || presets=(default asan-ubsan tsan)

stage=""
started=$SECONDS
begin() {
  stage=$1
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

begin "setup: scripts/setup-debian.sh"
scripts/setup-debian.sh

for preset in "${presets[@]}"; do
  begin "$preset: configure"
  cmake --preset "$preset"

  begin "$preset: build (-j$jobs)"
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
  "${runner[@]}" ctest --preset "$preset"
done

stage="done"
printf '\n==> all passed: %s  (%ds)\n' "${presets[*]}" $((SECONDS - started))
