#!/usr/bin/env bash
# AddressSanitizer + UBSan build of the test suite (CPU path) in build-asan/, then the unit
# tests and the multi-rank tests (ctest label "mpi") under it. Extra args go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./ci/setup.sh
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSB_SANITIZE=ON -DSB_ENABLE_CUDA=OFF >/dev/null
cmake --build build-asan -j"${JOBS:-$(nproc)}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
# OpenMPI's own allocations are not ours to fix: no leak report, but every other error aborts.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cd build-asan
ctest --output-on-failure -E '^(cli|plots|fuzz|two_host|network_)' --timeout 900 "$@"
