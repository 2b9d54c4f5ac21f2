#!/usr/bin/env bash
# The test command: installs dependencies (Debian packages), builds, runs every test with
# ctest — unit tests, multi-rank tests under mpirun, the CLI/JSON/plot tests. Exit != 0 on
# any failure. Extra arguments go to ctest (e.g. -R parity).
set -euo pipefail
cd "$(dirname "$0")/.."
./ci/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
cd build
ctest --output-on-failure --timeout 900 "$@"
