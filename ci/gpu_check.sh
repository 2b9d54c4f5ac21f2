#!/usr/bin/env bash
# GPU check for one machine with one NVIDIA GPU (sized for <= 8 minutes on an H200): build with
# CUDA/NCCL, run the CUDA-vs-CPU numerics tests (a skip counts as a failure here), then every
# strategy at world 1 on gpt2-124m in bf16-mixed through the shardbench CLI (NCCL, world 1),
# then the MFU runs of gpt2-124m and gpt2-350m (ddp, bf16-mixed, batch MFU_BATCH).
# Writes gpu.json (shardbench results), mfu_gpt2-124m.json, mfu_gpt2-350m.json, mfu.txt (the
# README's table rows), cuda_tests.xml, gpu_check.json (per-step status) and gpu_check.log into
# the output folder: $1, else $OUT, else ./gpu_check_out. Installs nothing.
#
# Knobs (environment): BUILD_DIR=build JOBS=$(nproc) MODEL=gpt2-124m PRECISION=bf16-mixed
#   STRATEGIES=all STEPS=10 WARMUP=3 MFU_BATCH=16 and per-step limits in seconds BUILD_S=240
#   TEST_S=90 RUN_S=300 MFU_S=120
# Exit status: 0 all passed; 1 a step failed (the log and gpu_check.json say which).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
OUTDIR="${1:-${OUT:-$ROOT/gpu_check_out}}"
mkdir -p "$OUTDIR" || exit 1
OUTDIR="$(cd "$OUTDIR" && pwd)"
LOG="$OUTDIR/gpu_check.log"
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1

BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-$(nproc)}"
MODEL="${MODEL:-gpt2-124m}"
PRECISION="${PRECISION:-bf16-mixed}"
STRATEGIES="${STRATEGIES:-all}"
STEPS="${STEPS:-10}"
WARMUP="${WARMUP:-3}"
BUILD_S="${BUILD_S:-240}"
TEST_S="${TEST_S:-90}"
RUN_S="${RUN_S:-300}"
MFU_BATCH="${MFU_BATCH:-16}"
MFU_S="${MFU_S:-120}"
# mpirun (started by `shardbench run --np`) refuses root without these; CI machines run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ROOT OUTDIR BUILD_DIR

declare -A STATUS=()
FAILED=0
step() {  # step NAME LIMIT_S CMD...: runs CMD under a time limit, records ok/failed(rc)
  local name="$1" limit="$2"
  shift 2
  echo "=== [$(date -u +%H:%M:%S)] $name (limit ${limit}s): $*"
  local t0=$SECONDS rc=0
  # Through bash -c so that a step may be one of the (exported) functions below.
  timeout --kill-after=10 "$limit" bash -c '"$@"' step "$@" || rc=$?
  if ((rc == 0)); then STATUS[$name]="ok"; else
    STATUS[$name]="failed(rc=$rc$( ((rc == 124 || rc == 137)) && echo ', timed out'))"
    FAILED=1
  fi
  echo "=== $name: ${STATUS[$name]} in $((SECONDS - t0))s"
  return $rc
}
finish() {
  {
    echo "{"
    echo "  \"passed\": $([ $FAILED -eq 0 ] && echo true || echo false),"
    echo "  \"elapsed_s\": $SECONDS,"
    echo "  \"steps\": {"
    local first=1 k
    for k in environment configure build cuda_tests shardbench_run results_check mfu_gpt2-124m \
             mfu_gpt2-350m mfu_table; do
      [ -n "${STATUS[$k]:-}" ] || continue
      ((first)) || echo ","
      printf '    "%s": "%s"' "$k" "${STATUS[$k]}"
      first=0
    done
    printf '\n  }\n}\n'
  } >"$OUTDIR/gpu_check.json"
  echo "=== gpu check: $([ $FAILED -eq 0 ] && echo PASSED || echo FAILED) in ${SECONDS}s;" \
       "outputs in $OUTDIR"
  exit $FAILED
}

# 1. What we run on; no GPU is a failure of this check, not a skip.
env_info() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || return 1
  nvidia-smi -L | grep -q '^GPU ' || { echo "no GPU listed by nvidia-smi"; return 1; }
  /usr/local/cuda/bin/nvcc --version | tail -2
  grep -m2 -E 'define NCCL_(MAJOR|MINOR)' /usr/local/cuda/include/nccl.h
  git rev-parse --short HEAD 2>/dev/null || true
}
export -f env_info
step environment 30 env_info || finish

# 2. Configure; a build dir copied from another checkout path is reset (CMake refuses it).
configure() {
  if [ -f "$BUILD_DIR/CMakeCache.txt" ] &&
     ! grep -q "^CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT\$" "$BUILD_DIR/CMakeCache.txt"; then
    echo "resetting $BUILD_DIR (configured for another source path)"
    rm -rf "$BUILD_DIR/CMakeCache.txt" "$BUILD_DIR/CMakeFiles"
  fi
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSB_ENABLE_CUDA=ON \
    | tee "$OUTDIR/configure.txt" || return 1
  grep -q 'shardbench: CUDA/NCCL backend ON' "$OUTDIR/configure.txt" ||
    { echo "CMake did not enable the CUDA/NCCL backend"; return 1; }
}
export -f configure
step configure 60 configure || finish
step build "$BUILD_S" cmake --build "$BUILD_DIR" -j "$JOBS" --target sb_cuda_tests shardbench ||
  finish

# 3. CUDA numerics: every kernel and a tiny training step against the CPU device.
cuda_tests() {
  "$BUILD_DIR/sb_cuda_tests" --gtest_output="xml:$OUTDIR/cuda_tests.xml" \
    | tee "$OUTDIR/cuda_tests.txt"
  local rc=${PIPESTATUS[0]}
  ((rc == 0)) || return "$rc"
  if grep -q '^\[  SKIPPED \]' "$OUTDIR/cuda_tests.txt"; then
    echo "CUDA tests were skipped on a GPU machine"
    return 1
  fi
}
export -f cuda_tests
step cuda_tests "$TEST_S" cuda_tests  # keep going: the run below is still worth having

# 4. Every strategy at world 1 (NCCL cannot put two ranks on one GPU; multi-rank correctness
# is tested on the MPI backend).
step shardbench_run "$RUN_S" "$BUILD_DIR/shardbench" run --device cuda --np 1 --model "$MODEL" \
  --precision "$PRECISION" --strategies "$STRATEGIES" --steps "$STEPS" --warmup "$WARMUP" \
  --out "$OUTDIR/gpu.json"

# 5. The results file is valid and every strategy finished with status ok and finite losses.
results_check() {
  [ -s "$OUTDIR/gpu.json" ] || { echo "no $OUTDIR/gpu.json"; return 1; }
  python3 results/validate.py "$OUTDIR/gpu.json" || return 1
  python3 - "$OUTDIR/gpu.json" <<'EOF'
import json, math, sys
doc = json.load(open(sys.argv[1]))
bad = 0
for r in doc["results"]:
    finite = all(math.isfinite(x) for x in r.get("loss") or [])
    print(f'{r["strategy"]:<26} {r["status"]:<6} {r.get("error") or ""}')
    if r["status"] != "ok" or not finite:
        bad += 1
print(f"backend {doc.get('backend')}, {len(doc['results'])} strategies, {bad} not ok")
sys.exit(1 if bad else 0)
EOF
}
export -f results_check
step results_check 30 results_check

# 6. MFU of the issue's two models: one rank, ddp (no sharding traffic at world 1), bf16-mixed
# (bf16 tensor-core matmuls), against the datasheet's dense bf16 peak.
for m in gpt2-124m gpt2-350m; do
  step "mfu_$m" "$MFU_S" "$BUILD_DIR/shardbench" run --device cuda --np 1 --model "$m" \
    --precision bf16-mixed --strategies ddp --batch "$MFU_BATCH" --steps "$STEPS" \
    --warmup "$WARMUP" --out "$OUTDIR/mfu_$m.json"
done
mfu_table() {
  python3 - "$OUTDIR" <<'EOF' | tee "$OUTDIR/mfu.txt"
import json, os, sys
print("| model | batch x seq | step (s, median) | tokens/s | TFLOP/s | MFU | peak reserved (GiB) |")
print("|---|---|---|---|---|---|---|")
for m in ("gpt2-124m", "gpt2-350m"):
    path = os.path.join(sys.argv[1], f"mfu_{m}.json")
    if not os.path.exists(path):
        print(f"| {m} | (no result) |")
        continue
    doc = json.load(open(path))
    r, c = doc["results"][0], doc["config"]
    if r["status"] != "ok":
        print(f"| {m} | {r['status']}: {r.get('error', '')} |")
        continue
    t, dev = r["throughput"], r["memory"].get("device") or {}
    print(f"| {m} | {c['batch_per_rank']} x {c['seq_len']} | {r['step_time_s']['median']:.4f} "
          f"| {t['tokens_per_s']:.0f} | {t['tflops']:.1f} | {100 * t['mfu']:.1f} % "
          f"| {dev.get('reserved_peak_bytes', 0) / 2**30:.1f} |")
EOF
}
export -f mfu_table
step mfu_table 30 mfu_table
finish
