#!/usr/bin/env bash
# The ZeRO++ claim table of docs/deepspeed.md (3Ψ -> 0.75Ψ across nodes): zero3 on small at 2 x 2, untied
# head (every tensor used once per pass, so ZeRO-3's volume is exactly 3Ψ), bf16, the paper's
# release schedule (where ZeRO++'s gathers repeat), then each of hpZ, qwZ, qgZ and their
# combinations; one results file each under OUTDIR (default /tmp/sb_zeropp), printed by
# plots/strategy_table.py --psi. Extra arguments go to every run.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/sb_zeropp}
shift || true
mkdir -p "$OUT"
SB=(./build/shardbench run --np 4 --ranks-per-node 2 --model small --untied-head
    --precision bf16-mixed --strategies zero3 --zero-schedule paper --steps 3 --warmup 1
    --batch 4 --quiet)
HPZ=(--zero-hpz-partition-size 2)
QWZ=(--zero-quantized-weights on)
# qgZ as shipped reads fp16 gradients: bf16 training with communication_data_type fp16
QGZ=(--zero-quantized-gradients on --zero-communication-data-type fp16)
source ci/table_runs.sh
EXTRA=("$@")
run plain "\`zero3\`"
run hpz "+ \`--zero-hpz-partition-size 2\`" "${HPZ[@]}"
run qwz "+ \`--zero-quantized-weights on\`" "${QWZ[@]}"
run qgz "+ \`--zero-quantized-gradients on\`" "${QGZ[@]}"
run hpz_qwz "+ hpZ + qwZ" "${HPZ[@]}" "${QWZ[@]}"
run all "+ hpZ + qwZ + qgZ" "${HPZ[@]}" "${QWZ[@]}" "${QGZ[@]}"
/usr/bin/python3 plots/strategy_table.py --psi "${rows[@]}"
