#!/usr/bin/env bash
# Installs what building and testing mimatrix needs on Debian 12 (bookworm), with apt-get.
# Idempotent: installs only missing packages, and runs apt-get update only then.
# Works as root, or through sudo otherwise. Extra packages may be given as arguments
# (scripts/test.sh --all adds chromium, for the long tier's test of the status page).
set -euo pipefail

packages=(
  build-essential   # g++ 12 and its sanitizer runtimes (libasan8, libubsan1, libtsan2)
  cmake             # 3.25 in bookworm; CMakePresets.json needs 3.25
  ninja-build       # the presets' generator
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  libfabric-dev     # transport::fabric
  libfabric-bin     # fi_info, fi_pingpong (benchmark/compare)
  libopenmpi-dev    # the OpenMPI baseline (benchmark/baselines)
  openmpi-bin
  libgloo-dev       # the Gloo baseline
  libboost1.81-dev  # the job server: Boost.Asio, and Boost.Beast for its monitoring
  libssl-dev        # the job server's HMAC authentication (OpenSSL)
  prometheus        # the job server's monitoring test scrapes /metrics with a real one
  zlib1g-dev        # the ResNet example reads gzip-compressed IDX files
  dataset-fashion-mnist  # ...its data set, in /usr/share/datasets/fashion-mnist
  libdnnl-dev       # oneDNN 2.6: the ResNet example's CPU layers (examples/02_resnet/nn)
  python3-torch     # PyTorch 1.13: the backend pytorch_backend/ and PyTorch's distributed test suite
  libtorch-dev      # ...its C++ headers and TorchConfig.cmake
  pybind11-dev      # ...the Python module mimatrix_torch
  "$@"
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup-debian: all ${#packages[@]} packages are installed"
  exit 0
fi

if ((EUID == 0)); then
  as_root=()
elif command -v sudo >/dev/null; then
  as_root=(sudo)
else
  echo "setup-debian: missing ${missing[*]}, and not root and no sudo to install them" >&2
  exit 1
fi

echo "setup-debian: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
dpkg_options=()
if [[ ${CI:-} == true ]]; then
  # A throwaway CI machine: dpkg need not sync every file it writes, and man-db need not
  # index the manual pages of a thousand files (tens of seconds of a fresh install).
  dpkg_options=(-o Dpkg::Options::=--force-unsafe-io)
  echo "man-db man-db/auto-update boolean false" | "${as_root[@]}" debconf-set-selections 2>/dev/null || true
fi
"${as_root[@]}" apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${dpkg_options[@]}" "${missing[@]}"
