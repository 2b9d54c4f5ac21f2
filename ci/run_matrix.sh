#!/usr/bin/env bash
# The main job: installs dependencies, builds, runs the default matrix (model `small`, all 8
# strategies, 4 MPI ranks as 2 virtual nodes x 2) on this CPU machine, writes
# results/latest.json, renders the plots into plots/out/, a timeline trace per strategy into
# plots/out/trace/ and the offline HTML report plots/out/report.html. Extra arguments go to
# `shardbench run` (e.g. --steps 10).
set -euo pipefail
cd "$(dirname "$0")/.."
./ci/build.sh
./build/shardbench run --np 4 --ranks-per-node 2 --model small --strategies all \
  --steps 10 --warmup 2 --batch 4 --trace plots/out/trace --out results/latest.json "$@"
/usr/bin/python3 plots/plot_results.py results/latest.json --trace-dir plots/out/trace --out plots/out
echo "plots: plots/out/"
# The HTML report: tables, phases, residuals, this run against the nightly baseline, the plots.
./build/shardbench report results/latest.json --baseline results/baseline/latest.json \
  --trace-dir plots/out/trace --out plots/out/report.html
