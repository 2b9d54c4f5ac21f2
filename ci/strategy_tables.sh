#!/usr/bin/env bash
# The README's "every strategy on small at 2 x 2" table: every registered strategy at its
# defaults, then the knob rows (FSDP2 reshard to the node, MiCS partitions, ZeRO-3 as the paper
# schedules it with ZeRO++'s hpZ/qwZ/qgZ, activation checkpointing), one results file each under
# OUTDIR (default /tmp/sb_tables), printed as one markdown table by plots/strategy_table.py.
# Extra arguments go to every run (e.g. --steps 5).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/sb_tables}
shift || true
mkdir -p "$OUT"
SB=(./build/shardbench run --np 4 --ranks-per-node 2 --model small --batch 4 --steps 3 --warmup 1
    --quiet)
source ci/table_runs.sh
EXTRA=("$@")
run all "default" --strategies all
run fsdp2_node "\`--fsdp2-reshard-after-forward 2\`" --strategies fsdp2 --fsdp2-reshard-after-forward 2
run mics4 "\`--mics-shard-size 4\`" --strategies mics --mics-shard-size 4
run mics_unit "\`--mics-schedule per-unit\`" --strategies mics --mics-schedule per-unit
run mics4h "\`--mics-schedule per-unit --mics-shard-size 4 --mics-hierarchical-params-gather on\`" \
  --strategies mics --mics-schedule per-unit --mics-shard-size 4 --mics-hierarchical-params-gather on
run z3paper "\`--zero-schedule paper\`" --strategies zero3 --zero-schedule paper
run z3hpz "\`--zero-schedule paper --zero-hpz-partition-size 2\`" --strategies zero3 \
  --zero-schedule paper --zero-hpz-partition-size 2
run z3qwz "\`--zero-schedule paper --zero-quantized-weights on\`" --strategies zero3 \
  --zero-schedule paper --zero-quantized-weights on
run z3pp "\`--zero-schedule paper\` + hpZ + qwZ" --strategies zero3 --zero-schedule paper \
  --zero-hpz-partition-size 2 --zero-quantized-weights on
run z3qgz "\`--zero-schedule paper --zero-quantized-gradients on --zero-qgz-variant suite\`" \
  --strategies zero3 --zero-schedule paper --zero-quantized-gradients on --zero-qgz-variant suite
run z3ppall "\`--zero-schedule paper\` + hpZ + qwZ + qgZ" --strategies zero3 --zero-schedule paper \
  --zero-hpz-partition-size 2 --zero-quantized-weights on --zero-quantized-gradients on \
  --zero-qgz-variant suite
run ac "\`--activation-checkpointing block\`" --strategies all --activation-checkpointing block
/usr/bin/python3 plots/strategy_table.py "${rows[@]}"
