#!/usr/bin/env bash
# Installs every dependency of shardbench from Debian's packages (idempotent, non-interactive).
# Does not touch CUDA: the toolkit under /usr/local/cuda is optional and detected by CMake.
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config
      openmpi-bin libopenmpi-dev libopenblas-dev
      nlohmann-json3-dev libbenchmark-dev libgtest-dev libgmock-dev libcli11-dev libfmt-dev
      python3-matplotlib python3-numpy python3-jsonschema
      iproute2 util-linux ethtool
      clang libclang-rt-14-dev
      chromium fonts-dejavu-core)  # the HTML report's browser test (headless) and its fonts
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
