#!/usr/bin/env bash
# The main job: installs dependencies, builds, runs the default configuration (model `small`,
# all 11 strategies, 4 MPI ranks as 2 virtual nodes x 2) on this CPU machine, writes
# results/runs/latest.json (git-ignored: a checkout stays clean), renders the plots into
# plots/out/, a timeline trace per strategy into plots/out/trace/ and the offline HTML report
# plots/out/report.html. Extra arguments go to `shardbench run` (flags it does not set already,
# e.g. --bucket-mb 10; a repeated flag is refused). The nightly matrix of several models and
# world shapes is ci/nightly.sh (ci/matrix.py ci/matrix/nightly.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
./ci/build.sh
OUT=results/runs/latest.json
./build/shardbench run --np 4 --ranks-per-node 2 --model small --strategies all \
  --steps 10 --warmup 2 --batch 4 --trace plots/out/trace --out "$OUT" "$@"
/usr/bin/python3 plots/plot_results.py "$OUT" --trace-dir plots/out/trace --out plots/out
echo "plots: plots/out/"
# The HTML report: tables, phases, residuals, this run against the nightly baseline, the plots.
# The baseline is the nightly matrix's cell of the same shape (small, 4 ranks as 2 x 2).
./build/shardbench report "$OUT" --baseline results/baseline/small-np4-fp32-476841f85d.json \
  --trace-dir plots/out/trace --out plots/out/report.html
