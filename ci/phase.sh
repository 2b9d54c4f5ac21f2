# Sourced by the ci/ scripts: `phase NAME COMMAND...` runs COMMAND and prints its wall time,
# e.g. "=== phase build: 312 s", so a slow CI run says which phase took the time.
phase() {
  local name=$1 t0=$SECONDS rc=0
  shift
  echo "=== phase ${name}: start $(date -u +%H:%M:%S)"
  "$@" || rc=$?
  echo "=== phase ${name}: $((SECONDS - t0)) s (exit ${rc})"
  return "$rc"
}
