# Sourced by the docs/ table scripts (ci/strategy_tables.sh, ci/zeropp_claim.sh): `run NAME
# LABEL FLAGS...` runs "${SB[@]}" with FLAGS and the scripts' EXTRA arguments into $OUT/NAME.json
# and appends "FILE=LABEL" to rows for plots/strategy_table.py.
rows=()
run() {
  local name=$1 label=$2
  shift 2
  "${SB[@]}" --out "$OUT/$name.json" "$@" "${EXTRA[@]}" > /dev/null
  rows+=("$OUT/$name.json=$label")
}
