#!/usr/bin/env bash
# Same model (small), world (4 ranks, 2 per virtual node), batch (4/rank) and step count under
# shardbench's ddp and PyTorch DDP (gloo, bench/torch_ddp.py): prints both median step times
# and their ratio. Needs the build (BUILD=build) and python3-torch (ci/setup_peer.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
NP=${NP:-4}; RPN=${RPN:-2}; BATCH=${BATCH:-4}; STEPS=${STEPS:-5}; WARMUP=${WARMUP:-1}
OUT=${OUT:-results/runs/peer-shardbench.json}  # git-ignored, beside the main job's
PY=${PYTHON:-python3}  # torch_ddp.py re-runs itself under /usr/bin/python3 if PY lacks torch
export OPENBLAS_NUM_THREADS=1
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
[ -x "$BUILD/shardbench" ] || { echo "compare_peer: no $BUILD/shardbench (build first)" >&2; exit 2; }
mkdir -p "$(dirname "$OUT")"

"./$BUILD/shardbench" run --np "$NP" --ranks-per-node "$RPN" --model small --strategies ddp \
  --steps "$STEPS" --warmup "$WARMUP" --batch "$BATCH" --out "$OUT"
peer=$("$PY" bench/torch_ddp.py --world "$NP" --batch "$BATCH" --steps "$STEPS" \
  --warmup "$WARMUP" --model small | tail -n 1)
echo "$peer"

"$PY" - "$OUT" "$peer" <<'PYEOF'
import json, statistics, sys
doc = json.load(open(sys.argv[1]))
ours = next(r for r in doc["results"] if r["strategy"] == "ddp")
peer = json.loads(sys.argv[2])
if ours.get("status") != "ok":
    sys.exit(f"compare_peer: shardbench ddp {ours.get('status')}: {ours.get('error')}")
st = ours["step_time_s"]["samples"]  # per measured step, max over ranks
ours_s = statistics.median(st)
peer_s = peer["median_step_s"]
tokens = peer["world"] * peer["batch_per_rank"] * doc["config"]["model"]["seq_len"]
print(f"\nsmall, world {peer['world']}, batch {peer['batch_per_rank']}/rank, "
      f"{len(st)} measured steps, median step time (max over ranks):")
print(f"  shardbench ddp : {ours_s:8.4f} s/step  {tokens / ours_s:9.0f} tokens/s")
print(f"  pytorch ddp    : {peer_s:8.4f} s/step  {tokens / peer_s:9.0f} tokens/s  "
      f"(torch {peer['torch']}, gloo, {peer['threads_per_rank']} thread/rank)")
print(f"  ratio shardbench/pytorch step time: {ours_s / peer_s:.3f} "
      f"({'faster' if ours_s < peer_s else 'slower'} than PyTorch by "
      f"{abs(1 - ours_s / peer_s) * 100:.0f}%)")
PYEOF
