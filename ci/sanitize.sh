#!/usr/bin/env bash
# AddressSanitizer + UBSan build of the test suite (CPU path) in build-asan/, then its tests.
# On every change (default): the unit tests (label unit), the property sweep's fast slice
# (sweep), the config fuzzer's corpus (fuzz) and one multi-rank entry per test binary (sanitize:
# every collective at 4:2, every strategy at 3:1 with padding); see tests/mpi/mpi_tests.cmake.
# SB_SANITIZE_FULL=1 (ci/nightly_sanitize.sh): every multi-rank shape and the matrix, gate, trace
# and report entries too, as before the split. Extra args go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/phase.sh
phase "asan setup" ./ci/setup.sh
# Only what the tests run: shardbench and the test binaries (not the micro-benchmarks).
asan_build() {
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSB_SANITIZE=ON \
    -DSB_ENABLE_CUDA=OFF >/dev/null &&
    cmake --build build-asan -j"${JOBS:-$(nproc)}" --target sb_test_programs
}
phase "asan build" asan_build
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export SB_CALIBRATION_CACHE="$PWD/build-asan/calibration_cache.json"  # as ci/test.sh's
rm -f "$SB_CALIBRATION_CACHE"
# OpenMPI's own allocations are not ours to fix: no leak report, but every other error aborts.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
select=(-L '^(unit|sweep|fuzz|sanitize)$' -LE netns)
# Full: what this script ran on every change before the split (all but the entries that build
# or plot on their own), the ASan-only mpi_run_strategies included.
[ -n "${SB_SANITIZE_FULL:-}" ] && select=(-E '^(cli|plots|fuzz|two_host|network_)')
asan_tests() {
  (cd build-asan && ctest --output-on-failure "${select[@]}" --timeout 900 "$@")
}
phase "asan tests" asan_tests "$@"
