#!/usr/bin/env bash
# GPU check for one machine with one NVIDIA GPU, sized for one device call (<= 9 minutes on an
# H200): the CUDA-vs-CPU numerics tests (a skip counts as a failure here), every strategy at
# world 1 on gpt2-124m in bf16-mixed through the shardbench CLI (NCCL), then the MFU runs of
# gpt2-124m and gpt2-350m (ddp, bf16-mixed, batch MFU_BATCH).
#
#   ci/gpu_check.sh [--bundle ARCHIVE] [OUTDIR]
#
# --bundle: the programs come prebuilt from ci/gpu_bundle.sh's archive (the GPU machines lent
# to this project have CUDA, cuBLAS and NCCL but not the project's other dependencies, and no
# package registry); it is unpacked to $BUNDLE_DIR (/tmp/sb-bundle). Without it, the script
# configures and builds in $BUILD_DIR (a machine with every dependency of ci/setup.sh).
# OUTDIR: $OUT, else ./gpu_check_out. It receives seven files (the device tool returns at most
# eight): gpu_check.log, gpu_check.json (status per step, rewritten after every step),
# cuda_tests.xml, gpu.json (the strategies), mfu_gpt2-124m.json, mfu_gpt2-350m.json and mfu.txt
# (the README's table rows). Installs nothing.
#
# Knobs (environment): BUILD_DIR=build JOBS=$(nproc) MODEL=gpt2-124m PRECISION=bf16-mixed
#   STRATEGIES=all STEPS=10 WARMUP=3 MFU_BATCH=16 and per-step limits in seconds BUILD_S=200
#   TEST_S=60 RUN_S=150 MFU_S=60 (all the limits together stay under 9 minutes).
# Exit status: 0 all passed; 1 a step failed (the log and gpu_check.json say which).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
BUNDLE=""
if [ "${1:-}" = "--bundle" ]; then
  BUNDLE="$(realpath "${2:?--bundle needs the archive made by ci/gpu_bundle.sh}")"
  shift 2
fi
OUTDIR="${1:-${OUT:-$ROOT/gpu_check_out}}"
mkdir -p "$OUTDIR" || exit 1
OUTDIR="$(cd "$OUTDIR" && pwd)"
WORK="$(mktemp -d)"  # what does not go back: configure output, the tests' plain output
LOG="$OUTDIR/gpu_check.log"
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1

BUILD_DIR="${BUILD_DIR:-build}"
BUNDLE_DIR="${BUNDLE_DIR:-/tmp/sb-bundle}"
JOBS="${JOBS:-$(nproc)}"
MODEL="${MODEL:-gpt2-124m}"
PRECISION="${PRECISION:-bf16-mixed}"
STRATEGIES="${STRATEGIES:-all}"
STEPS="${STEPS:-10}"
WARMUP="${WARMUP:-3}"
BUILD_S="${BUILD_S:-200}"
TEST_S="${TEST_S:-60}"
RUN_S="${RUN_S:-150}"
MFU_BATCH="${MFU_BATCH:-16}"
MFU_S="${MFU_S:-60}"
# mpirun (started by `shardbench run --np`) refuses root without these; CI machines run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1 PYTHONUNBUFFERED=1
export ROOT OUTDIR WORK BUILD_DIR BUNDLE BUNDLE_DIR

SB="$BUILD_DIR/shardbench"
SB_TESTS="$BUILD_DIR/sb_cuda_tests"
if [ -n "$BUNDLE" ]; then
  SB="$BUNDLE_DIR/bin/shardbench"
  SB_TESTS="$BUNDLE_DIR/bin/sb_cuda_tests"
fi
export SB SB_TESTS

STEP_NAMES=()
declare -A STATUS=()
FAILED=0
write_status() {  # gpu_check.json: rewritten after every step, so a killed run still says how far
  {
    echo "{"
    echo "  \"passed\": $([ $FAILED -eq 0 ] && echo true || echo false),"
    echo "  \"elapsed_s\": $SECONDS,"
    echo "  \"mode\": \"$([ -n "$BUNDLE" ] && echo bundle || echo build)\","
    echo "  \"steps\": {"
    local first=1 k
    for k in "${STEP_NAMES[@]}"; do
      ((first)) || echo ","
      printf '    "%s": "%s"' "$k" "${STATUS[$k]}"
      first=0
    done
    printf '\n  }\n}\n'
  } >"$OUTDIR/gpu_check.json.tmp" && mv "$OUTDIR/gpu_check.json.tmp" "$OUTDIR/gpu_check.json"
}
step() {  # step NAME LIMIT_S CMD...: runs CMD under a time limit, records ok/failed(rc)
  local name="$1" limit="$2"
  shift 2
  echo "=== [$(date -u +%H:%M:%S)] $name (limit ${limit}s): $*"
  local t0=$SECONDS rc=0
  STEP_NAMES+=("$name")
  STATUS[$name]="running"
  write_status
  # Through bash -c so that a step may be one of the (exported) functions below.
  timeout --kill-after=10 "$limit" bash -c '"$@"' step "$@" || rc=$?
  if ((rc == 0)); then STATUS[$name]="ok"; else
    STATUS[$name]="failed(rc=$rc$( ((rc == 124 || rc == 137)) && echo ', timed out'))"
    FAILED=1
  fi
  echo "=== $name: ${STATUS[$name]} in $((SECONDS - t0))s"
  write_status
  return $rc
}
finish() {
  write_status
  rm -rf "$WORK"
  echo "=== gpu check: $([ $FAILED -eq 0 ] && echo PASSED || echo FAILED) in ${SECONDS}s;" \
       "outputs in $OUTDIR"
  exit $FAILED
}

# 1. What we run on; no GPU is a failure of this check, not a skip.
env_info() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || return 1
  nvidia-smi -L | grep -q '^GPU ' || { echo "no GPU listed by nvidia-smi"; return 1; }
  nproc; grep -m1 'model name' /proc/cpuinfo; ldd --version | head -1
  git rev-parse --short HEAD 2>/dev/null || true
}
export -f env_info
step environment 30 env_info || finish

if [ -n "$BUNDLE" ]; then
  # 2a. The prebuilt programs: unpack, then point the loader, OpenMPI and Python at them. CUDA's
  # own libraries come from this machine (toolkit, or the pip wheels beside PyTorch).
  mkdir -p "$BUNDLE_DIR"
  cuda_libs="$(python3 - <<'EOF' 2>/dev/null
import glob, sys
dirs = ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]
dirs += sorted({d for p in sys.path for d in glob.glob(p + "/nvidia/*/lib")})
print(":".join(d for d in dirs if glob.glob(d + "/lib*.so*")))
EOF
)"
  export LD_LIBRARY_PATH="$BUNDLE_DIR/lib:$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$BUNDLE_DIR/bin:$BUNDLE_DIR/mpi/bin:$PATH"
  export PYTHONPATH="$BUNDLE_DIR/python${PYTHONPATH:+:$PYTHONPATH}" SB_NO_REEXEC=1
  export OPAL_PREFIX="$BUNDLE_DIR/mpi" OPAL_BINDIR="$BUNDLE_DIR/mpi/bin" \
         OPAL_LIBDIR="$BUNDLE_DIR/lib" OPAL_PKGLIBDIR="$BUNDLE_DIR/mpi/lib/openmpi3" \
         OPAL_DATADIR="$BUNDLE_DIR/mpi/share" OPAL_PKGDATADIR="$BUNDLE_DIR/mpi/share/openmpi" \
         OPAL_SYSCONFDIR="$BUNDLE_DIR/mpi/etc"
  unpack() {
    tar -C "$BUNDLE_DIR" -xJf "$BUNDLE" || return 1
    head -2 "$BUNDLE_DIR/MANIFEST"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    local missing
    missing="$(ldd "$SB" "$SB_TESTS" | grep 'not found')"
    [ -z "$missing" ] || { echo "unresolved libraries:"; echo "$missing"; return 1; }
  }
  export -f unpack
  step unpack 60 unpack || finish
else
  # 2b. Configure and build; a build dir copied from another checkout path is reset.
  configure() {
    if [ -f "$BUILD_DIR/CMakeCache.txt" ] &&
       ! grep -q "^CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT\$" "$BUILD_DIR/CMakeCache.txt"; then
      echo "resetting $BUILD_DIR (configured for another source path)"
      rm -rf "$BUILD_DIR/CMakeCache.txt" "$BUILD_DIR/CMakeFiles"
    fi
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSB_ENABLE_CUDA=ON \
      | tee "$WORK/configure.txt" || return 1
    grep -q 'shardbench: CUDA/NCCL backend ON' "$WORK/configure.txt" ||
      { echo "CMake did not enable the CUDA/NCCL backend"; return 1; }
  }
  export -f configure
  step configure 60 configure || finish
  step build "$BUILD_S" cmake --build "$BUILD_DIR" -j "$JOBS" --target sb_cuda_tests shardbench ||
    finish
fi

# 3. CUDA numerics: every kernel, the bf16 matmul path and a tiny training step against the CPU.
cuda_tests() {
  "$SB_TESTS" --gtest_output="xml:$OUTDIR/cuda_tests.xml" | tee "$WORK/cuda_tests.txt"
  local rc=${PIPESTATUS[0]}
  ((rc == 0)) || return "$rc"
  if grep -q '^\[  SKIPPED \]' "$WORK/cuda_tests.txt"; then
    echo "CUDA tests were skipped on a GPU machine"
    return 1
  fi
}
export -f cuda_tests
step cuda_tests "$TEST_S" cuda_tests  # keep going: the runs below are still worth having

# 4. Every strategy at world 1 (NCCL cannot put two ranks on one GPU; multi-rank correctness
# is tested on the MPI backend). Started as an MPI singleton: no mpirun needed.
step shardbench_run "$RUN_S" "$SB" run --device cuda --model "$MODEL" --precision "$PRECISION" \
  --strategies "$STRATEGIES" --steps "$STEPS" --warmup "$WARMUP" --out "$OUTDIR/gpu.json"

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
    dev = (r.get("memory") or {}).get("device") or {}
    print(f'{r["strategy"]:<26} {r["status"]:<6} peak tracked '
          f'{(r.get("memory") or {}).get("peak_bytes_per_rank", 0) / 2**30:.2f} GiB, reserved '
          f'{dev.get("reserved_peak_bytes", 0) / 2**30:.2f} GiB {r.get("error") or ""}')
    if r["status"] != "ok" or not finite:
        bad += 1
print(f"backend {doc.get('backend')}, matmuls {doc['config'].get('matmul_precision')}, "
      f"{len(doc['results'])} strategies, {bad} not ok")
sys.exit(1 if bad else 0)
EOF
}
export -f results_check
step results_check 30 results_check

# 6. MFU of the issue's two models: one rank, ddp (no sharding traffic at world 1), bf16-mixed
# (bf16 tensor-core matmuls), against the datasheet's dense bf16 peak.
for m in gpt2-124m gpt2-350m; do
  step "mfu_$m" "$MFU_S" "$SB" run --device cuda --model "$m" --precision bf16-mixed \
    --strategies ddp --batch "$MFU_BATCH" --steps "$STEPS" --warmup "$WARMUP" \
    --out "$OUTDIR/mfu_$m.json"
done
mfu_table() {
  python3 - "$OUTDIR" <<'EOF' | tee "$OUTDIR/mfu.txt"
import json, os, sys
print("| model | batch x seq | step (s, median) | tokens/s | TFLOP/s | MFU | peak reserved (GiB) |")
print("|---|---|---|---|---|---|---|")
notes = []
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
    # the embedded prediction describes this device (its preset), or says that none does
    cl = doc.get("prediction_cluster")
    used = f"{cl['name']} ({cl['device']})" if cl else \
        "no preset: " + doc.get("prediction_cluster_note", "?")
    notes.append(f"{m}: device {doc.get('device_name')}; predicted with {used}; "
                 f"MFU denominator {t.get('peak_flops_source', '?')}")
print("\n" + "\n".join(notes))
EOF
}
export -f mfu_table
step mfu_table 30 mfu_table
finish
