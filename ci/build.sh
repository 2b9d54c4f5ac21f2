#!/usr/bin/env bash
# Configures and builds shardbench into build/ (Release). The CUDA/NCCL backend is built when
# /usr/local/cuda is present (set SB_ENABLE_CUDA=OFF to skip it); the CPU path always.
set -euo pipefail
cd "$(dirname "$0")/.."
"$(dirname "$0")/setup.sh"
JOBS="${JOBS:-$(nproc)}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSB_ENABLE_CUDA="${SB_ENABLE_CUDA:-ON}" >/dev/null
cmake --build build -j"$JOBS"
