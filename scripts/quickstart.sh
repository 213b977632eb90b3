#!/usr/bin/env bash
# The main job: install build dependencies, build the `default` preset's examples, and
# run the quick start (a ring allreduce across in-process ranks, checked and timed).
#
#   scripts/quickstart.sh [ranks] [max_bytes]      defaults: 4 ranks, 64M
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup-debian.sh
cmake --preset default >/dev/null
cmake --build --preset default --parallel "${MIMATRIX_JOBS:-2}" --target quickstart
build/default/examples/00_quickstart/quickstart "${1:-4}" "${2:-64M}"
