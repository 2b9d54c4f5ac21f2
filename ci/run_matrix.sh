#!/usr/bin/env bash
# The main job: installs dependencies, builds, runs the default configuration (model `small`,
# all 8 strategies, 4 MPI ranks as 2 virtual nodes x 2) on this CPU machine, writes
# results/runs/latest.json (git-ignored: a checkout stays clean) and renders the plots into
# plots/out/. Extra arguments go to `shardbench run` (flags it does not set already, e.g.
# --bucket-mb 10; a repeated flag is refused). The nightly matrix of
# several models and world shapes is ci/nightly.sh (ci/matrix.py ci/matrix/nightly.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
./ci/build.sh
OUT=results/runs/latest.json
./build/shardbench run --np 4 --ranks-per-node 2 --model small --strategies all \
  --steps 10 --warmup 2 --batch 4 --out "$OUT" "$@"
/usr/bin/python3 plots/plot_results.py "$OUT" --out plots/out
echo "plots: plots/out/"
