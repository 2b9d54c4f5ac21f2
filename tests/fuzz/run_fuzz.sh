#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a bounded number of
# iterations from a seed corpus (presets, specs, a real results file). Exit != 0 on any crash.
# Usage: run_fuzz.sh [RUNS] (default 20000 per target). Skips (77) without clang's libFuzzer.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
RUNS="${1:-20000}"
OUT="$(mktemp -d /tmp/sbfuzz.XXXXXX)"
trap 'rm -rf "$OUT"' EXIT
command -v clang++ >/dev/null || { echo "SKIP: clang++ not installed (ci/setup.sh installs it)"; exit 77; }
FLAGS=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$ROOT")
clang++ "${FLAGS[@]}" "$ROOT/tests/fuzz/fuzz_model_spec.cc" "$ROOT/harness/model/config.cc" \
  "$ROOT/harness/model/llama_layout.cc" -o "$OUT/fuzz_model_spec"
clang++ "${FLAGS[@]}" "$ROOT/tests/fuzz/fuzz_results_reader.cc" "$ROOT/bench/cli/results_reader.cc" \
  "$ROOT/bench/cli/option_rows.cc" \
  -o "$OUT/fuzz_results_reader"
mkdir -p "$OUT/spec" "$OUT/results"
# A seed whose first byte is odd is parsed under --arch llama (fuzz_model_spec.cc); the last
# one once overflowed Llama's SwiGLU width rule before the width's range check.
for s in tiny small gpt2-124m 4,256,8,128,4096 2,30,4,16,64 ",,,," "1,1,1,1,2" llama-tiny \
    llama2-70b "1,0390801256,7,128,4096"; do
  printf '%s' "$s" > "$OUT/spec/$(echo "$s" | md5sum | cut -c1-8)"
done
cp "$ROOT"/tests/fuzz/corpus/*.json "$OUT/results/" 2>/dev/null || true
echo '{"suite":"shardbench","results":[{"strategy":"ddp","status":"ok"}]}' > "$OUT/results/min.json"
"$OUT/fuzz_model_spec" -runs="$RUNS" -max_len=64 "$OUT/spec" 2>&1 | tail -2
"$OUT/fuzz_results_reader" -runs="$RUNS" -max_len=4096 "$OUT/results" 2>&1 | tail -2
echo "fuzz: both targets ran $RUNS iterations clean"
