#!/usr/bin/env bash
# Nightly job: build, run the full default strategy matrix and the micro-benchmarks, validate,
# render plots, and compare with results/baseline/latest.json; exits non-zero on a regression.
# Does not install anything (ci/setup.sh does) and never updates the baseline by itself.
#
# Run by hand:   ci/nightly.sh            (from anywhere; it works in the repository root)
# From cron (02:30 UTC every night, one run at a time thanks to the lock below):
#   30 2 * * *  cd /path/to/shardbench && ci/nightly.sh >/dev/null 2>&1
#   (the full log is kept in results/nightly/<date>.log)
# From a CI scheduler (GitHub Actions `schedule:`, GitLab pipeline schedules, Jenkins cron):
#   run `ci/setup.sh && ci/nightly.sh` and archive results/nightly/ and plots/out/nightly-*/.
# To accept a run as the new baseline after review:
#   cp results/nightly/<date>.json results/baseline/latest.json
#
# Knobs (environment): NP=4 RANKS_PER_NODE=2 MODEL=small STEPS=10 WARMUP=2 STRATEGIES=all
#   BENCH_NP=2 THRESHOLD_PCT=5 BASELINE=results/baseline/latest.json SKIP_BUILD=0 JOBS=2
# Exit status: 0 all good; 1 a regression against the baseline; 2 a step failed (build,
#   run, invalid results, micro-benchmarks, plots, or an incomparable baseline); 3 already
#   running.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2

NP="${NP:-4}"
RANKS_PER_NODE="${RANKS_PER_NODE:-2}"
MODEL="${MODEL:-small}"
STEPS="${STEPS:-10}"
WARMUP="${WARMUP:-2}"
STRATEGIES="${STRATEGIES:-all}"
BENCH_NP="${BENCH_NP:-2}"
THRESHOLD_PCT="${THRESHOLD_PCT:-5}"
BASELINE="${BASELINE:-results/baseline/latest.json}"
SKIP_BUILD="${SKIP_BUILD:-0}"
JOBS="${JOBS:-2}"

DATE="$(date -u +%Y%m%dT%H%M%SZ)"
OUTDIR="results/nightly"
RESULT="$OUTDIR/$DATE.json"
BENCH_OUT="$OUTDIR/$DATE-bench.json"
PLOTDIR="plots/out/nightly-$DATE"
LOG="$OUTDIR/$DATE.log"
PY=/usr/bin/python3  # Debian's python: matplotlib, numpy, jsonschema come from apt
[ -x "$PY" ] || PY=python3

mkdir -p "$OUTDIR"
exec 9>"$OUTDIR/.lock"
if ! flock -n 9; then
  echo "nightly: another run holds $OUTDIR/.lock; not starting" >&2
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

# --- the strategy matrix ------------------------------------------------------------------------
step "run: $STRATEGIES, np $NP, $RANKS_PER_NODE ranks/node, model $MODEL, $STEPS steps"
./build/shardbench run --np "$NP" --ranks-per-node "$RANKS_PER_NODE" --model "$MODEL" \
  --strategies "$STRATEGIES" --steps "$STEPS" --warmup "$WARMUP" --out "$RESULT"
rc=$?
((rc == 0)) || failed+=("shardbench run (exit $rc)")
have_result=0
if [ -s "$RESULT" ]; then
  step "validate $RESULT"
  if "$PY" results/validate.py "$RESULT"; then
    have_result=1
    # A strategy that errored is a bug even without a baseline (an OOM may be the point).
    errored="$("$PY" -c 'import json, sys
print(" ".join(r["strategy"] for r in json.load(open(sys.argv[1]))["results"]
               if r.get("status") == "error"))' "$RESULT")"
    [ -z "$errored" ] || failed+=("strategies ended in error: $errored")
  else
    failed+=("results validation")
  fi
else
  failed+=("no results file at $RESULT")
fi

# --- micro-benchmarks (only rank 0 writes --benchmark_out; see bench/micro_bench.cc) ----
if [ -x build/sb_micro_bench ]; then
  step "micro-benchmarks under mpirun -np $BENCH_NP"
  mpirun -np "$BENCH_NP" --oversubscribe --bind-to none ./build/sb_micro_bench \
    --benchmark_out="$BENCH_OUT" --benchmark_out_format=json
  rc=$?
  ((rc == 0)) || failed+=("sb_micro_bench (exit $rc)")
else
  echo "nightly: build/sb_micro_bench not built; skipping micro-benchmarks"
fi

# --- plots and the comparison -------------------------------------------------------------------
verdict="no baseline ($BASELINE missing): not compared"
regressed=0
if [ "$have_result" = 1 ]; then
  step "plots -> $PLOTDIR"
  if [ -f "$BASELINE" ]; then
    plot_args=("$BASELINE" "$RESULT" --labels "baseline,$DATE")
  else
    plot_args=("$RESULT" --labels "$DATE")
  fi
  "$PY" plots/plot_results.py "${plot_args[@]}" --out "$PLOTDIR" || failed+=("plots")

  if [ -f "$BASELINE" ]; then
    step "compare with $BASELINE (threshold $THRESHOLD_PCT %)"
    "$PY" plots/compare.py "$BASELINE" "$RESULT" --threshold-pct "$THRESHOLD_PCT"
    case $? in
      0) verdict="no regression against $BASELINE" ;;
      1) verdict="REGRESSION against $BASELINE"; regressed=1 ;;
      *) verdict="comparison failed"; failed+=("compare") ;;
    esac
  fi
  ln -sfn "$DATE.json" "$OUTDIR/latest.json"
fi

# --- the HTML report (issue 15): tables, plots, baseline verdicts, trends over results/nightly --
REPORT="$OUTDIR/$DATE.html"
if [ "$have_result" = 1 ]; then
  step "report -> $REPORT"
  report_args=("$RESULT" --history "$OUTDIR" --out "$REPORT")
  [ -f "$BASELINE" ] && report_args+=(--baseline "$BASELINE")
  ./build/shardbench report "${report_args[@]}" || failed+=("report")
fi

# --- summary ------------------------------------------------------------------------------------
step "summary"
echo "results:    $RESULT"
[ -s "$BENCH_OUT" ] && echo "micro:      $BENCH_OUT"
[ -d "$PLOTDIR" ] && echo "plots:      $PLOTDIR/"
[ -s "$REPORT" ] && echo "report:     $REPORT"
echo "log:        $LOG"
echo "comparison: $verdict"
if ((${#failed[@]})); then
  printf 'FAILED:     %s\n' "${failed[@]}"
  exit 2
fi
exit "$regressed"
