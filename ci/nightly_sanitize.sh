#!/usr/bin/env bash
# Nightly, under ASan + UBSan (build-asan/, ci/sanitize.sh): every multi-rank shape of the
# suite, the property sweep's whole grid (tests/cli/test_sweep.py --slice full), the config
# fuzzer at 400 mutants per parser and the libFuzzer targets at 200,000 runs each. The seeds
# are printed; a failure replays with SB_SWEEP_SEED / SB_FUZZ_SEED. Called by ci/nightly.sh;
# runs on its own too. Exit != 0 when any part fails (each part still runs).
set -uo pipefail
cd "$(dirname "$0")/.."
source ci/phase.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
SEED="${SB_SWEEP_SEED:-$(date -u +%Y%m%d)}"  # one slice per night, replayable from the date
failed=()
SB_SANITIZE_FULL=1 ./ci/sanitize.sh || failed+=("ASan suite")
phase "asan sweep (full grid)" /usr/bin/python3 tests/cli/test_sweep.py build-asan --slice full \
  --seed "$SEED" || failed+=("sweep (seed $SEED)")
phase "asan config fuzzer" /usr/bin/python3 tests/fuzz/fuzz_configs.py build-asan --runs 400 \
  --seed "${SB_FUZZ_SEED:-$SEED}" || failed+=("fuzz_configs (seed ${SB_FUZZ_SEED:-$SEED})")
rc=0
phase "libFuzzer targets" tests/fuzz/run_fuzz.sh 200000 || rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || failed+=("run_fuzz.sh")
if ((${#failed[@]})); then
  printf 'nightly_sanitize: FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "nightly_sanitize: all clean (seed $SEED)"
