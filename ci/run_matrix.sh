#!/usr/bin/env bash
# The main job: installs dependencies, builds, runs the default matrix (model `small`, all 8
# strategies, 4 MPI ranks as 2 virtual nodes x 2) on this CPU machine, writes
# results/latest.json and renders the plots into plots/out/. Extra arguments go to
# `shardbench run` (e.g. --steps 10).
set -euo pipefail
cd "$(dirname "$0")/.."
./ci/build.sh
./build/shardbench run --np 4 --ranks-per-node 2 --model small --strategies all \
  --steps 10 --warmup 2 --batch 4 --out results/latest.json "$@"
/usr/bin/python3 plots/plot_results.py results/latest.json --out plots/out
echo "plots: plots/out/"
