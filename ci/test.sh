#!/usr/bin/env bash
# The test command: installs dependencies (Debian packages), builds, runs every test with
# ctest — unit tests, multi-rank tests under mpirun, the CLI/JSON/plot/fuzz/two-host tests and
# the property sweep's fast slice — then the ASan + UBSan build and its share of the suite
# (ci/sanitize.sh; SB_SKIP_SANITIZE=1 skips it; the whole multi-rank matrix under ASan is
# nightly: ci/nightly_sanitize.sh). Each phase prints its wall time ("=== phase NAME: N s").
# Exit != 0 on any failure; every skipped test is listed with its reason after ctest's summary.
# Extra arguments go to ctest (e.g. -R parity) and skip the ASan pass.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/phase.sh
t0=$SECONDS
phase setup ./ci/setup.sh
phase build ./ci/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
# Hundreds of short runs: the MFU calibration (~1.4 s each) is measured by the first and reused
# by the rest (bench/cli/peak_calibration.h); the tests of the calibration itself measure.
export SB_CALIBRATION_CACHE="$PWD/build/calibration_cache.json"
rm -f "$SB_CALIBRATION_CACHE"
status=0
run_tests() { (cd build && ctest --output-on-failure --timeout 900 "$@"); }
phase tests run_tests "$@" || status=$?
# Every skip, with its reason (GTEST_SKIP, unittest skips, entries that exit 77).
/usr/bin/python3 tests/skip_summary.py build/Testing/Temporary/LastTest.log || true
if [ "$status" -eq 0 ] && [ -z "${SB_SKIP_SANITIZE:-}" ] && [ $# -eq 0 ]; then
  ./ci/sanitize.sh || status=$?
fi
echo "=== total: $((SECONDS - t0)) s (exit ${status})"
exit "$status"
