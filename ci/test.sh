#!/usr/bin/env bash
# The test command: installs dependencies (Debian packages), builds, runs every test with
# ctest — unit tests, multi-rank tests under mpirun, the CLI/JSON/plot/fuzz/two-host tests —
# then the ASan + UBSan build of the suite (ci/sanitize.sh; SB_SKIP_SANITIZE=1 skips it).
# Exit != 0 on any failure; every skipped test is listed with its reason after ctest's summary.
# Extra arguments go to ctest (e.g. -R parity) and skip the ASan pass.
set -euo pipefail
cd "$(dirname "$0")/.."
./ci/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
status=0
(cd build && ctest --output-on-failure --timeout 900 "$@") || status=$?
# Every skip, with its reason (GTEST_SKIP, unittest skips, entries that exit 77).
/usr/bin/python3 tests/skip_summary.py build/Testing/Temporary/LastTest.log || true
[ "$status" -eq 0 ] || exit "$status"
# The same unit and multi-rank tests built with AddressSanitizer + UBSan (build-asan/).
if [ -z "${SB_SKIP_SANITIZE:-}" ] && [ $# -eq 0 ]; then
  ./ci/sanitize.sh
fi
