#!/usr/bin/env bash
# Nightly job: build, run the committed matrix file (one MPI job per cell, ci/matrix.py) and
# the micro-benchmarks, validate every cell's file, render plots, and compare each cell with
# its baseline results/baseline/<cell id>.json (plots/compare.py's noise-aware gate); exits
# non-zero on a regression. Does not install anything (ci/setup.sh does) and never updates a
# baseline by itself.
#
# Run by hand:   ci/nightly.sh            (from anywhere; it works in the repository root)
# From cron (02:30 UTC every night, one run at a time thanks to the lock below):
#   30 2 * * *  cd /path/to/shardbench && ci/nightly.sh >/dev/null 2>&1
#   (the full log is kept in results/nightly/<date>/nightly.log)
# From a CI scheduler (GitHub Actions `schedule:`, GitLab pipeline schedules, Jenkins cron):
#   run `ci/setup.sh && ci/nightly.sh` and archive results/nightly/ and plots/out/nightly-*/.
# To accept a night's cells as the new baselines after review:
#   cp results/nightly/<date>/*-np*-*.json results/baseline/   (the cell files only)
#
# Knobs (environment): MATRIX=ci/matrix/nightly.toml BASELINE_DIR=results/baseline
#   THRESHOLD_PCT=15 BENCH_NP=2 SKIP_BUILD=0 JOBS=2 SKIP_SANITIZE=0 (1: no ASan part)
# Exit status: 0 all good; 1 a regression against a baseline; 2 a step failed (build, a
#   cell, invalid results, micro-benchmarks, plots, or a comparison that could not be made);
#   3 already running.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2

MATRIX="${MATRIX:-ci/matrix/nightly.toml}"
BASELINE_DIR="${BASELINE_DIR:-results/baseline}"
THRESHOLD_PCT="${THRESHOLD_PCT:-15}"  # measured: identical reruns differ up to 14 % here
BENCH_NP="${BENCH_NP:-2}"
SKIP_BUILD="${SKIP_BUILD:-0}"
JOBS="${JOBS:-2}"

DATE="$(date -u +%Y%m%dT%H%M%SZ)"
OUTDIR="results/nightly/$DATE"      # one file per cell + index.json (git-ignored)
BENCH_OUT="$OUTDIR/micro-bench.json"
PLOTDIR="plots/out/nightly-$DATE"
LOG="$OUTDIR/nightly.log"
PY=/usr/bin/python3  # Debian's python: matplotlib, numpy, jsonschema come from apt
[ -x "$PY" ] || PY=python3

mkdir -p "$OUTDIR"
exec 9>"results/nightly/.lock"
if ! flock -n 9; then
  echo "nightly: another run holds results/nightly/.lock; not starting" >&2
  exit 3
fi
exec > >(tee -a "$LOG") 2>&1

if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"

failed=()   # steps that failed: reported at the end, exit 2
step() { echo; echo "=== nightly [$(date -u +%H:%M:%S)] $*"; }

step "start $DATE on $(hostname) at $(git rev-parse --short HEAD 2>/dev/null || echo no-git)"

# --- build -------------------------------------------------------------------------------------
if [ "$SKIP_BUILD" != "1" ]; then
  step "build"
  if ! { cmake -S . -B build -G Ninja && cmake --build build -j"$JOBS"; }; then
    echo "nightly: build failed; nothing else can run"
    exit 2
  fi
fi

# --- the matrix, each cell compared with its baseline ------------------------------------------
step "matrix $MATRIX -> $OUTDIR (baselines: $BASELINE_DIR)"
"$PY" ci/matrix.py "$MATRIX" --out "$OUTDIR" --baseline-dir "$BASELINE_DIR" \
  --threshold-pct "$THRESHOLD_PCT"
matrix_rc=$?
regressed=0
case $matrix_rc in
  0) verdict="no regression against $BASELINE_DIR" ;;
  1) verdict="REGRESSION against $BASELINE_DIR"; regressed=1 ;;
  *) verdict="a cell or a comparison failed (see the summary above)"
     failed+=("matrix (exit $matrix_rc)") ;;
esac

for f in "$OUTDIR"/*-np*-*.json; do   # the cell files (comparisons are in $OUTDIR/compare/)
  [ -s "$f" ] || continue
  step "validate $f"
  "$PY" results/validate.py "$f" || { failed+=("results validation: $f"); continue; }
  # A strategy that errored is a bug even without a baseline (an OOM may be the point).
  errored="$("$PY" -c 'import json, sys
print(" ".join(r["strategy"] for r in json.load(open(sys.argv[1]))["results"]
               if r.get("status") == "error"))' "$f")"
  [ -z "$errored" ] || failed+=("$(basename "$f"): strategies ended in error: $errored")
  base="$BASELINE_DIR/$(basename "$f")"
  plot_args=("$f" --labels "$DATE")
  [ -f "$base" ] && plot_args=("$base" "$f" --labels "baseline,$DATE")
  "$PY" plots/plot_results.py "${plot_args[@]}" --out "$PLOTDIR/$(basename "$f" .json)" \
    >/dev/null || failed+=("plots: $f")
done

# --- micro-benchmarks (only rank 0 writes --benchmark_out) --------------------------------------
if [ -x build/sb_micro_bench ]; then
  step "micro-benchmarks under mpirun -np $BENCH_NP"
  mpirun -np "$BENCH_NP" --oversubscribe --bind-to none ./build/sb_micro_bench \
    --benchmark_out="$BENCH_OUT" --benchmark_out_format=json
  rc=$?
  ((rc == 0)) || failed+=("sb_micro_bench (exit $rc)")
else
  echo "nightly: build/sb_micro_bench not built; skipping micro-benchmarks"
fi
ln -sfn "$DATE" results/nightly/latest

# --- the HTML report: one page per cell (tables, plots, baseline verdicts, trends) ------------
# A cell's trends read every dated run of the same cell id: results/nightly/<date>/<id>.json,
# gathered as links in $OUTDIR/history/<id>/<date>.json.
reports=0
for f in "$OUTDIR"/*-np*-*.json; do
  [ -s "$f" ] || continue
  id="$(basename "$f" .json)"
  hist="$OUTDIR/history/$id"
  mkdir -p "$hist"
  for past in results/nightly/*/"$id.json"; do
    [ -s "$past" ] && ln -sfn "$(realpath "$past")" "$hist/$(basename "$(dirname "$past")").json"
  done
  report_args=("$f" --history "$hist" --out "$OUTDIR/$id.html")
  [ -f "$BASELINE_DIR/$id.json" ] && report_args+=(--baseline "$BASELINE_DIR/$id.json")
  ./build/shardbench report "${report_args[@]}" >/dev/null || failed+=("report: $id")
  reports=$((reports + 1))
done

# --- the sanitizers: every multi-rank shape, the sweep's whole grid, the fuzzers ----------------
if [ "${SKIP_SANITIZE:-0}" != "1" ]; then
  step "ASan/UBSan: full multi-rank matrix, property sweep grid, fuzzers (ci/nightly_sanitize.sh)"
  ./ci/nightly_sanitize.sh || failed+=("nightly_sanitize.sh (see its FAILED line above)")
fi

# --- summary ------------------------------------------------------------------------------------
step "summary"
echo "cells:      $OUTDIR/ (index.json)"
[ -s "$BENCH_OUT" ] && echo "micro:      $BENCH_OUT"
[ -d "$PLOTDIR" ] && echo "plots:      $PLOTDIR/"
((reports > 0)) && echo "reports:    $OUTDIR/<cell>.html ($reports)"
echo "log:        $LOG"
echo "comparison: $verdict"
if ((${#failed[@]})); then
  printf 'FAILED:     %s\n' "${failed[@]}"
  exit 2
fi
exit "$regressed"
