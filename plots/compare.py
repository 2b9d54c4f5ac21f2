#!/usr/bin/python3
# Compares two shardbench results files strategy by strategy and gates on regressions: the
# nightly job's pass/fail. Owns the regression rule below; does not plot (plot_results.py)
# and does not re-check the schema's details beyond refusing files it cannot read.
"""Compare a baseline and a new shardbench results file; exit 1 on a regression.

usage: python3 plots/compare.py BASELINE.json NEW.json [--threshold-pct 5] [--k 3]
                                [--bytes-pct 0.5] [--min-time-s 1e-4] [--allow-config-diff]

Prints one row per strategy and metric: baseline, new, change, the allowed change, verdict.

The rule (per strategy present in the baseline):
  status               ok -> oom/error, or a strategy missing from NEW, is a regression.
  step_time_median_s   timed, lower is better. Noise of one file's step-time samples:
                       s = 1.4826 * MAD(samples) (p95 - median if fewer than 3 samples);
                       the two files combine as S = sqrt(s_base^2 + s_new^2). Regression when
                       new > base + max(threshold% * base, k * S, min-time-s).
  tokens_per_s         timed, higher is better; the step-time limit seen as throughput:
                       regression when new < base / (1 + f), f = max(threshold%,
                       k * S / base_step, min-time-s / base_step).
  exposed_s            timed, lower is better, no samples of its own, so the step-time noise
                       S bounds it: regression when new > base + max(threshold% * base,
                       k * S, min-time-s).
  peak_bytes_per_rank  deterministic, lower is better: regression on any increase beyond
  sent_bytes_intra     bytes-pct (default 0.5 %) of the baseline (from 0: any increase).
  sent_bytes_inter
Changes the other way beyond the same limits are reported as "improved" and never fail.

Both files must describe the same experiment (backend, model, world, ranks per node,
batch, precision, wrap, ...); otherwise exit 2 unless --allow-config-diff.
Exit status: 0 no regression, 1 regression, 2 bad input (unreadable, foreign, schema-invalid
or incomparable files).
"""
import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "results"))
import validate as sbv  # noqa: E402

STRATEGY_ORDER = ["ddp", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op",
                  "fsdp_hybrid_shard", "fsdp_hybrid_shard_zero2"]
# Keys that must agree for the two files to be comparable (top level, then config).
SAME_TOP = ["kind", "backend", "traffic_accounting"]
SAME_CONFIG = ["model", "params", "world_size", "ranks_per_node", "num_nodes", "batch_per_rank",
               "seq_len", "precision", "wrap", "bucket_mb", "collectives", "backward_prefetch",
               "forward_prefetch", "limit_all_gathers", "overlap", "prefetch_elements",
               "persist_elements", "matmul_precision", "grad_accum", "ddp",
               "fsdp_no_sync"]
# What a key missing from an older file meant (files before matmul_precision computed every
# matmul in fp32).
# Files before grad_accum ran one micro-batch per step; files before `ddp` ran the previous
# (idealised) ddp, which no `ddp` object describes: comparing them with a newer file is refused.
CONFIG_DEFAULTS = {"matmul_precision": "fp32", "grad_accum": 1, "fsdp_no_sync": True}
# Keys that may differ but are worth a warning.
WARN_CONFIG = ["steps", "warmup", "seed", "lr", "device", "mem_limit_gb"]


def get(obj, dotted):
    for key in dotted.split("."):
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    if isinstance(obj, bool) or not isinstance(obj, (int, float)) or not math.isfinite(obj):
        return None
    return obj


def spread(result):
    """Noise of one file's step time, seconds: 1.4826 * MAD of the samples (a robust sigma: one
    slow step does not widen it), or p95 - median when there are fewer than 3 samples."""
    st = result.get("step_time_s") if isinstance(result.get("step_time_s"), dict) else {}
    samples = [s for s in st.get("samples") or [] if get({"v": s}, "v") is not None]
    if len(samples) >= 3:
        med = statistics.median(samples)
        return 1.4826 * statistics.median(abs(s - med) for s in samples)
    p95, med = get(st, "p95"), get(st, "median")
    return max(0.0, p95 - med) if p95 is not None and med is not None else 0.0


# --- formatting --------------------------------------------------------------------------------

def fmt_bytes(b):
    if b is None:
        return "-"
    for div, suf in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if abs(b) >= div:
            return f"{b / div:.4g} {suf}"
    return f"{b:.0f} B"


def fmt_s(s):
    if s is None:
        return "-"
    if abs(s) >= 1:
        return f"{s:.4g} s"
    if abs(s) >= 1e-3:
        return f"{s * 1e3:.4g} ms"
    return f"{s * 1e6:.4g} us"


def fmt_rate(v):
    if v is None:
        return "-"
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.4g}{suf}/s"
    return f"{v:.4g}/s"


def fmt_pct(p):
    if p is None:
        return "-"
    if math.isinf(p):
        return "+inf%" if p > 0 else "-inf%"
    return f"{p:+.2f}%"


# --- the rule ----------------------------------------------------------------------------------

class Row:
    def __init__(self, strategy, metric, base, new, change, limit, verdict):
        self.cells = [strategy, metric, base, new, change, limit, verdict]
        self.regressed = verdict == "REGRESSED"


def rel(base, new):
    if base == 0:
        return 0.0 if new == 0 else math.copysign(math.inf, new)
    return (new - base) / abs(base) * 100.0


def compare_strategy(name, b, n, args):
    rows = []
    bs, ns = b.get("status"), (n or {}).get("status")
    if n is None:
        return [Row(name, "status", str(bs), "missing", "-", "-",
                    "REGRESSED" if bs == "ok" else "missing")]
    if bs != "ok" or ns != "ok":
        if bs == "ok":
            verdict = "REGRESSED"
        elif ns == "ok":
            verdict = "improved"
        else:
            verdict = "both failed"
        rows.append(Row(name, "status", str(bs), str(ns), "-", "-", verdict))
        return rows
    thr = args.threshold_pct / 100.0
    noise = math.hypot(spread(b), spread(n))

    # timed, lower is better
    for metric, key in (("step_time_median_s", "step_time_s.median"),
                        ("exposed_s", "comm.exposed_s")):
        bv, nv = get(b, key), get(n, key)
        if bv is None or nv is None:
            rows.append(Row(name, metric, fmt_s(bv), fmt_s(nv), "-", "-", "no data"))
            continue
        allowed = max(thr * bv, args.k * noise, args.min_time_s)
        verdict = ("REGRESSED" if nv > bv + allowed else
                   "improved" if nv < bv - allowed else "ok")
        pct = f" ({allowed / bv * 100:.1f}%)" if bv > 0 else ""
        rows.append(Row(name, metric, fmt_s(bv), fmt_s(nv), fmt_pct(rel(bv, nv)),
                        f"+{fmt_s(allowed)}{pct}", verdict))

    # timed, higher is better: step-time noise carried over relative to the baseline step
    bv, nv = get(b, "throughput.tokens_per_s"), get(n, "throughput.tokens_per_s")
    if bv is None or nv is None:
        rows.insert(0, Row(name, "tokens_per_s", fmt_rate(bv), fmt_rate(nv), "-", "-", "no data"))
    else:
        step = get(b, "step_time_s.median")
        f = max(thr, args.k * noise / step, args.min_time_s / step) if step else thr
        frac = 1.0 - 1.0 / (1.0 + f)  # the step-time limit, seen as a throughput drop
        allowed = frac * bv
        verdict = ("REGRESSED" if nv < bv - allowed else
                   "improved" if nv > bv + allowed else "ok")
        rows.insert(0, Row(name, "tokens_per_s", fmt_rate(bv), fmt_rate(nv),
                           fmt_pct(rel(bv, nv)), f"-{frac * 100:.2f}%", verdict))

    # deterministic, lower is better
    for metric, key in (("peak_bytes_per_rank", "memory.peak_bytes_per_rank"),
                        ("sent_bytes_intra", "comm.per_step.sent_bytes_intra"),
                        ("sent_bytes_inter", "comm.per_step.sent_bytes_inter")):
        bv, nv = get(b, key), get(n, key)
        if bv is None or nv is None:
            rows.append(Row(name, metric, fmt_bytes(bv), fmt_bytes(nv), "-", "-", "no data"))
            continue
        allowed = args.bytes_pct / 100.0 * bv
        verdict = ("REGRESSED" if nv > bv + allowed else
                   "improved" if nv < bv - allowed else "same" if nv == bv else "ok")
        rows.append(Row(name, metric, fmt_bytes(bv), fmt_bytes(nv), fmt_pct(rel(bv, nv)),
                        f"+{args.bytes_pct:g}%", verdict))
    return rows


def config_differences(base, new):
    hard, soft = [], []
    for k in SAME_TOP:
        if base.get(k) != new.get(k):
            hard.append(f"{k}: {base.get(k)!r} -> {new.get(k)!r}")
    bc, nc = base.get("config") or {}, new.get("config") or {}
    for k in SAME_CONFIG:
        b, n = bc.get(k, CONFIG_DEFAULTS.get(k)), nc.get(k, CONFIG_DEFAULTS.get(k))
        if b != n:
            hard.append(f"config.{k}: {b!r} -> {n!r}")
    for k in WARN_CONFIG:
        if bc.get(k) != nc.get(k):
            soft.append(f"config.{k}: {bc.get(k)!r} -> {nc.get(k)!r}")
    return hard, soft


def by_name(doc):
    out = {}
    for r in doc.get("results") or []:
        if isinstance(r, dict) and isinstance(r.get("strategy"), str):
            out.setdefault(r["strategy"], r)
    return out


def load(path):
    doc = sbv.load_run_results(path)
    problems = sbv.schema_errors(doc)
    if problems:
        more = f" (and {len(problems) - 1} more; run results/validate.py)" if len(problems) > 1 \
            else ""
        raise sbv.BadInput(f"{path}: does not match results/schema.json: {problems[0]}{more}")
    return doc


def print_table(rows):
    head = ["strategy", "metric", "baseline", "new", "change", "allowed", "verdict"]
    cells = [head] + [r.cells for r in rows]
    widths = [max(len(str(c[i])) for c in cells) for i in range(len(head))]
    right = {2, 3, 4, 5}

    def line(c):
        return "  ".join(str(v).rjust(w) if i in right else str(v).ljust(w)
                         for i, (v, w) in enumerate(zip(c, widths))).rstrip()
    print(line(head))
    print("  ".join("-" * w for w in widths))
    prev = None
    for r in rows:  # the strategy once per block, and on every regressed row (grep-able)
        c = list(r.cells)
        if c[0] == prev and not r.regressed:
            c[0] = ""
        prev = r.cells[0]
        print(line(c))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("baseline", metavar="BASELINE.json")
    ap.add_argument("new", metavar="NEW.json")
    ap.add_argument("--threshold-pct", type=float, default=5.0,
                    help="smallest timed change that counts, %% of baseline (default 5)")
    ap.add_argument("--k", type=float, default=3.0,
                    help="noise multiplier on the combined step-time spread (default 3)")
    ap.add_argument("--bytes-pct", type=float, default=0.5,
                    help="allowed increase of deterministic metrics, %% (default 0.5)")
    ap.add_argument("--min-time-s", type=float, default=1e-4,
                    help="timed changes below this many seconds never count (default 1e-4)")
    ap.add_argument("--allow-config-diff", action="store_true",
                    help="compare files whose experiment differs (warn instead of exit 2)")
    args = ap.parse_args(argv)
    for v, flag in ((args.threshold_pct, "--threshold-pct"), (args.k, "--k"),
                    (args.bytes_pct, "--bytes-pct"), (args.min_time_s, "--min-time-s")):
        if not math.isfinite(v) or v < 0:
            print(f"error: {flag} must be a non-negative number", file=sys.stderr)
            return 2
    try:
        base, new = load(args.baseline), load(args.new)
    except sbv.BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    hard, soft = config_differences(base, new)
    if hard and not args.allow_config_diff:
        print("error: the two files describe different experiments (--allow-config-diff to "
              "compare anyway):\n  " + "\n  ".join(hard), file=sys.stderr)
        return 2
    for d in hard + soft:
        print(f"warning: {d}")

    print(f"baseline: {args.baseline} (commit {base.get('git_commit')}, {base.get('created_utc')},"
          f" {base.get('host')})")
    print(f"new:      {args.new} (commit {new.get('git_commit')}, {new.get('created_utc')},"
          f" {new.get('host')})")
    print(f"rule: timed metrics need > max({args.threshold_pct:g}%, {args.k:g} x combined "
          f"step-time spread, {fmt_s(args.min_time_s)}); bytes > {args.bytes_pct:g}%; "
          "ok -> failed status\n")

    b_by, n_by = by_name(base), by_name(new)
    order = [s for s in STRATEGY_ORDER if s in b_by or s in n_by]
    order += [s for s in list(b_by) + list(n_by) if s not in order]
    order = list(dict.fromkeys(order))
    rows = []
    for name in order:
        if name not in b_by:
            rows.append(Row(name, "status", "missing", str(n_by[name].get("status")), "-", "-",
                            "new"))
            continue
        rows += compare_strategy(name, b_by[name], n_by.get(name), args)
    print_table(rows)

    bad = [r for r in rows if r.regressed]
    if bad:
        names = list(dict.fromkeys(r.cells[0] for r in bad))
        print(f"\nREGRESSION: {len(bad)} metric(s) in {len(names)} strategy(ies): "
              + ", ".join(f"{r.cells[0]}/{r.cells[1]}" for r in bad))
        return 1
    improved = sum(r.cells[6] == "improved" for r in rows)
    print(f"\nno regression ({len(rows)} rows compared, {improved} improved)")
    return 0


if __name__ == "__main__":
    sbv.ensure_system_python(["jsonschema"])
    sys.exit(main(sys.argv[1:]))
