#!/usr/bin/python3
# Compares two shardbench results files strategy by strategy and gates on regressions: the
# nightly job's pass/fail. Owns the regression rule below; does not plot (plot_results.py)
# and does not re-check the schema's details beyond refusing files it cannot read.
"""Compare a baseline and a new shardbench results file; exit 1 on a regression.

usage: python3 plots/compare.py BASELINE.json NEW.json [--threshold-pct 10] [--min-time-s 1e-5]
                                [--peak-mem-pct 5] [--baseline-repeat F ...] [--new-repeat F ...]
                                [--json OUT] [--allow-config-diff]

Prints one row per strategy and metric: baseline, new, change, the allowed change, verdict.

The rule (per strategy present in the baseline):
  status               ok -> oom/error, or a strategy missing from NEW, is a regression.
  step_time_median_s   timed, lower is better; gated on noise, not on one number. Each file's
  tokens_per_s         per-step samples give a nonparametric 95 % confidence interval of the
                       median (order statistics: [x_(l), x_(n-l+1)] with l the largest rank
                       where P(Binomial(n, 1/2) <= l-1) <= 2.5 %; [min, max] below 6 samples).
                       A regression needs BOTH: the intervals separate (new's lower bound above
                       the baseline's upper bound) AND the medians differ by more than
                       max(threshold-pct (default 10 %), min-time-s). tokens/s is the same test
                       seen as throughput. Improvements: the mirror image, never failing.
                       "noisy": slower by more than the threshold, but the intervals overlap —
                       the samples are too spread to tell (more --steps); reported, not failing.
                       Repeats: --baseline-repeat/--new-repeat FILE add runs of the same
                       configuration; per strategy each side keeps its least disturbed run
                       (lowest median: other load only slows a run down). Interleave them.
  exposed_s            reported, not gated: one number per file without samples, and the most
                       timing-sensitive figure (which collective waits depends on scheduling).
  mfu                  reported, not gated (it follows the step time), and only where both
                       results divide by the same definition of the peak
                       (throughput.peak_basis.definition; files without it counted a CPU run's
                       devices as min(world, cores x nodes), virtual nodes as machines). Where
                       the definitions differ the row says "not compared" and one note says
                       why, once per comparison: a changed denominator is not a regression.
  payload_bytes        deterministic: compared exactly; any increase is a regression.
  sent_bytes_intra     (--collectives ring counts them; mpi/NCCL model them — still a pure
  sent_bytes_inter     function of the configuration.)
  model_state_*_bytes  deterministic (params, grads, optimizer per rank): exact.
  peak_bytes_per_rank  counted, but with --overlap on it depends on when asynchronous
                       collectives finish (their buffers are freed then): allowed +peak-mem-pct
                       (default 5 %, about 1.7x the largest spread observed between identical
                       runs of the nightly matrix; docs/ci.md). Exact with --overlap off.

Machines: a results file records its machine (`machine`: CPU model, cores, calibrated peak,
BLAS, MPI; GPU device and driver; `machine.fingerprint` hashes all but the peak). Step time and
tokens/s compare raw only when both files carry the same fingerprint (or neither has one:
files from before fingerprints). Otherwise (one file without one counts as another machine,
so a committed baseline meets every new machine this way) they compare as time x calibrated peak — the new
file's samples scaled by its per-device calibrated peak over the baseline's
(results[].throughput.peak_basis.per_device_flops: one core's sgemm on CPU; not the total
peak_flops, whose count of devices is a definition that changed), the figure MFU and HFU
divide by; a baseline without it is compared raw and the header says so — with --cross-machine-threshold-pct (default 25 %: the
peak calibrates compute speed, not memory or network speed, so a residual remains), and the
header says so. Bytes, counts, model state and peak memory are compared as always.

Both files must describe the same experiment (backend, model, world, ranks per node,
batch, precision, wrap, ...); otherwise exit 2 unless --allow-config-diff.
Exit status: 0 no regression, 1 regression, 2 bad input (unreadable, foreign, schema-invalid
or incomparable files).
"""
import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "results"))
import validate as sbv  # noqa: E402

STRATEGY_ORDER = ["ddp", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op",
                  "fsdp_hybrid_shard", "fsdp_hybrid_shard_zero2", "fsdp2", "fsdp2_hsdp", "mics"]
# Keys that must agree for the two files to be comparable (top level, then config).
SAME_TOP = ["kind", "backend", "traffic_accounting"]
SAME_CONFIG = ["model", "params", "world_size", "ranks_per_node", "num_nodes", "batch_per_rank",
               "seq_len", "precision", "wrap", "bucket_mb", "collectives", "backward_prefetch",
               "forward_prefetch", "limit_all_gathers", "overlap", "prefetch_elements",
               "persist_elements", "matmul_precision", "zero_grad_reduce", "reuse_distance",
               "grad_accum", "ddp", "fsdp_no_sync", "fsdp2_reshard_after_forward",
               "fsdp2_reshard_root", "fsdp2_prefetch", "fsdp2_reduce_dtype",
               "mics_shard_size", "mics_hierarchical_params_gather",
               "fsdp_use_orig_params", "max_live_elements", "model_persist_elements",
               "zero3_fetch", "zero_hpz_partition_size", "zero_quantized_weights",
               "zero_quantized_gradients", "zero_contiguous_gradients",
               "zero_communication_data_type", "zero_qgz_variant", "mics_schedule"]
# What a key missing from an older file meant (files before matmul_precision computed every
# matmul in fp32; files before zero_grad_reduce ran the ZeRO paper's schedule: reduce-scatter,
# every ZeRO-3 gather released; files before grad_accum ran one micro-batch per step; files
# before zero3_fetch gathered one tensor per collective, with no live-element or model-wide
# persistence cap). Files
# before `ddp` ran the previous (idealised) ddp, which no `ddp` object describes: comparing
# them with a newer file is refused.
CONFIG_DEFAULTS = {"matmul_precision": "fp32", "zero_grad_reduce": "reduce_scatter",
                   "reuse_distance": 0, "grad_accum": 1, "fsdp_no_sync": True,
                   "fsdp2_reshard_after_forward": True, "fsdp2_reshard_root": False, "fsdp2_prefetch": 1,
                   "fsdp2_reduce_dtype": "auto", "mics_shard_size": 0,
                   "mics_hierarchical_params_gather": False, "fsdp_use_orig_params": False,
                   "max_live_elements": 1000000000, "model_persist_elements": 9223372036854775807,
                   "zero3_fetch": "per_tensor", "zero_hpz_partition_size": 1,
                   "zero_quantized_weights": False, "zero_quantized_gradients": False,
                   "zero_contiguous_gradients": False, "zero_communication_data_type": "auto",
                   "zero_qgz_variant": "suite", "mics_schedule": "per_unit"}
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


def step_samples(result):
    """Per-step times of one result (max over ranks per step); [median] for files without."""
    st = result.get("step_time_s") if isinstance(result.get("step_time_s"), dict) else {}
    samples = [v for v in st.get("samples") or [] if get({"v": v}, "v") is not None]
    if not samples and get(st, "median") is not None:
        samples = [st["median"]]
    return samples


def median_ci95(samples):
    """Nonparametric 95 % CI of the median: order statistics x_(l), x_(n-l+1) where l is the
    largest rank with P(Binomial(n, 1/2) <= l - 1) <= 2.5 % (so coverage >= 95 %); [min, max]
    when n is too small for that (n <= 5). bench/cli/results_reader.cc does the same for the
    exporters' bounds."""
    x = sorted(samples)
    n = len(x)
    cdf, l = 0.0, 0
    for k in range(n):
        cdf += math.comb(n, k) / 2.0 ** n
        if cdf > 0.025:
            break
        l = k + 1
    return (x[0], x[-1]) if l < 1 else (x[l - 1], x[n - l])


# --- formatting --------------------------------------------------------------------------------

def fmt_scaled(v, units, last):
    """v in the first of `units` ((divisor, text), largest first) it reaches, else `last`."""
    if v is None:
        return "-"
    for div, text in units:
        if abs(v) >= div:
            return f"{v / div:.4g}{text}"
    return last.format(v)


def fmt_bytes(b):
    return fmt_scaled(b, ((1 << 30, " GiB"), (1 << 20, " MiB"), (1 << 10, " KiB")), "{:.0f} B")


def fmt_s(s):
    if s is None:
        return "-"
    if abs(s) >= 1:
        return f"{s:.4g} s"
    if abs(s) >= 1e-3:
        return f"{s * 1e3:.4g} ms"
    return f"{s * 1e6:.4g} us"


def fmt_rate(v):
    return fmt_scaled(v, ((1e9, "G/s"), (1e6, "M/s"), (1e3, "k/s")), "{:.4g}/s")


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


TIMED_INFO = (("exposed_s", "comm.exposed_s"),)
EXACT_BYTES = (("payload_bytes", "comm.per_step.payload_bytes"),
               ("sent_bytes_intra", "comm.per_step.sent_bytes_intra"),
               ("sent_bytes_inter", "comm.per_step.sent_bytes_inter"),
               ("model_state_params_bytes", "memory.model_state_bytes_per_rank.params"),
               ("model_state_grads_bytes", "memory.model_state_bytes_per_rank.grads"),
               ("model_state_optimizer_bytes", "memory.model_state_bytes_per_rank.optimizer"))


# What a file without throughput.peak_basis divided a CPU run by: min(world, cores x nodes),
# virtual nodes counted as machines (about 2x the hardware on the default matrix).
LEGACY_PEAK = "topology"


def peak_basis(result):
    """(definition, devices) of a result's MFU denominator."""
    basis = (result.get("throughput") or {}).get("peak_basis") or {}
    devices = basis.get("devices")
    if devices is None and get(result, "throughput.peak_flops"):
        devices = "?"
    return basis.get("definition", LEGACY_PEAK), devices


def mfu_row(name, b, n):
    """MFU beside its denominator: compared only under one definition of the peak."""
    bm, nm = get(b, "throughput.mfu"), get(n, "throughput.mfu")
    (bd, bdev), (nd, ndev) = peak_basis(b), peak_basis(n)
    if bm is None or nm is None:
        return Row(name, "mfu", "-", "-", "-", "not gated", "no data")
    if bd != nd:
        return Row(name, "mfu", f"{bm:.1%} /{bdev}", f"{nm:.1%} /{ndev}", "-",
                   f"peak: {bd} -> {nd}", "not compared")
    return Row(name, "mfu", f"{bm:.1%}", f"{nm:.1%}", fmt_pct(rel(bm, nm)), "not gated", "info")


def mfu_notes(base, new):
    """One note per comparison whose MFU denominators are defined differently."""
    n_by = by_name(new)
    pairs = {(peak_basis(b)[0], peak_basis(n_by[s])[0]) for s, b in by_name(base).items()
             if s in n_by and b.get("status") == "ok" and n_by[s].get("status") == "ok"}
    pairs = {(bd, nd) for bd, nd in pairs if bd != nd}
    return [f"MFU's denominator is defined differently (baseline: {bd}, new: {nd}; "
            f"'{LEGACY_PEAK}' counted virtual nodes as machines, 'hardware' counts the physical "
            f"cores of the distinct machines used): MFU is not compared, step time and bytes "
            f"are. Re-record the baseline to compare MFU again." for bd, nd in sorted(pairs)]


def same_machine(base, new):
    """True when both files carry the same machine fingerprint (raw times compare)."""
    fb = (base.get("machine") or {}).get("fingerprint") if isinstance(base.get("machine"), dict) else None
    fn = (new.get("machine") or {}).get("fingerprint") if isinstance(new.get("machine"), dict) else None
    return fb == fn  # two files from before fingerprints (None, None): compared raw, as then


def machine_line(base, new):
    def desc(doc):
        m = doc.get("machine") if isinstance(doc.get("machine"), dict) else {}
        return (f"{m.get('fingerprint', 'no fingerprint')} ({m.get('cpu_model', '?')}, "
                f"{m.get('cores', '?')} cores, peak {m.get('calibrated_peak_gflops', '?')} GFLOP/s)")
    if same_machine(base, new):
        return f"machine: the same ({desc(base)}): step time compared raw"
    if not any(per_device_peak(r) for r in base.get("results") or [] if isinstance(r, dict)):
        return (f"machine: baseline {desc(base)} vs new {desc(new)}: different machines, and the "
                f"baseline records no per-device peak, so step time is compared raw; bytes, "
                f"counts and memory exactly. Re-record the baseline on this machine")
    return (f"machine: baseline {desc(base)} vs new {desc(new)}: different machines, so step time "
            f"and tokens/s are compared as time x calibrated per-device peak (the MFU figure); "
            f"bytes, counts and memory exactly")


def per_device_peak(result):
    """The calibrated peak of one device (one core on CPU) a result ran on, or None.

    Not throughput.peak_flops: that is per device x devices counted, and how devices are counted
    changed (peak_basis.definition), so its ratio across files would mix the machine with the
    definition. Files from before peak_basis carry no per-device figure."""
    per = get(result, "throughput.peak_basis.per_device_flops")
    return per if isinstance(per, (int, float)) and per > 0 else None


def peak_scale(b, n):
    """new per-device peak / baseline per-device peak of one strategy (1 when either lacks it)."""
    bp, np_ = per_device_peak(b), per_device_peak(n)
    return np_ / bp if bp and np_ else 1.0


def step_time_rows(name, b, n, args):
    """Step time and tokens/s: a regression when the medians' 95 % CIs separate and the change
    passes the threshold (see the module doc). Across machines, time x calibrated peak."""
    bs, ns = step_samples(b), step_samples(n)
    if not bs or not ns:
        return [Row(name, "step_time_median_s", "-", "-", "-", "-", "no data")]
    cross = not getattr(args, "same_machine", True)
    scale = peak_scale(b, n) if cross else 1.0
    ns = [x * scale for x in ns]  # in the baseline machine's seconds
    threshold = args.cross_machine_threshold_pct if cross else args.threshold_pct
    bm, nm = statistics.median(bs), statistics.median(ns)
    (blo, bhi), (nlo, nhi) = median_ci95(bs), median_ci95(ns)
    big = abs(nm - bm) > max(threshold / 100.0 * bm, args.min_time_s)
    separate = nlo > bhi or nhi < blo
    verdict = ("REGRESSED" if separate and nm > bm and big else
               "improved" if separate and nm < bm and big else
               "noisy" if big and nm > bm else "ok")
    ci = f"CIs [{fmt_s(blo)}, {fmt_s(bhi)}] / [{fmt_s(nlo)}, {fmt_s(nhi)}]"
    rows = [Row(name, "step_time_x_peak" if cross else "step_time_median_s", fmt_s(bm), fmt_s(nm),
                fmt_pct(rel(bm, nm)), f"> {threshold:g}% + {ci}", verdict)]
    bt, nt = get(b, "throughput.tokens_per_s"), get(n, "throughput.tokens_per_s")
    if nt is not None:
        nt = nt / scale
    if bt is not None and nt is not None:
        rows.insert(0, Row(name, "tokens_per_s", fmt_rate(bt), fmt_rate(nt), fmt_pct(rel(bt, nt)),
                           "as step time", verdict))
    return rows


def compare_strategy(name, b, n, args, overlap=True):
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
    rows += step_time_rows(name, b, n, args)
    for metric, key in TIMED_INFO:
        bv, nv = get(b, key), get(n, key)
        rows.append(Row(name, metric, fmt_s(bv), fmt_s(nv),
                        fmt_pct(rel(bv, nv)) if None not in (bv, nv) else "-", "not gated", "info"))
    rows.append(mfu_row(name, b, n))

    # deterministic, lower is better: exact, and peak memory within its observed spread
    peak_pct = args.peak_mem_pct if overlap else 0.0
    limits = [(m, k, 0.0) for m, k in EXACT_BYTES]
    limits.append(("peak_bytes_per_rank", "memory.peak_bytes_per_rank", peak_pct))
    for metric, key, pct in limits:
        bv, nv = get(b, key), get(n, key)
        if bv is None or nv is None:
            rows.append(Row(name, metric, fmt_bytes(bv), fmt_bytes(nv), "-", "-", "no data"))
            continue
        allowed = pct / 100.0 * bv
        verdict = ("REGRESSED" if nv > bv + allowed else
                   "improved" if nv < bv - allowed else "same" if nv == bv else "ok")
        rows.append(Row(name, metric, fmt_bytes(bv), fmt_bytes(nv), fmt_pct(rel(bv, nv)),
                        f"+{pct:g}%" if pct else "exact", verdict))
    return rows


def least_disturbed(doc, repeats):
    """Of several runs of one configuration (`doc` and `repeats`), keeps per strategy the run
    with the lowest median step in `doc`: other load on the machine only ever slows a run
    down, so that run is the least disturbed one, and its per-step samples give the interval.
    Interleave the repeats of the two sides (A B A B ...) so both meet the same load."""
    for other in repeats:
        hard, _ = config_differences(doc, other)
        if hard:
            raise sbv.BadInput("a --*-repeat file is another experiment: " + hard[0])
        others = by_name(other)
        for i, r in enumerate(doc.get("results") or []):
            o = others.get(r.get("strategy"))
            if r.get("status") != "ok" or not o or o.get("status") != "ok":
                continue
            if get(o, "step_time_s.median") is not None and get(r, "step_time_s.median") is not None \
                    and o["step_time_s"]["median"] < r["step_time_s"]["median"]:
                doc["results"][i] = o


def model_with_context(model):
    if isinstance(model, dict) and "context" not in model and "seq_len" in model:
        model = dict(model, context=model["seq_len"])
    # files before --activation-checkpointing ran without it
    if isinstance(model, dict) and "activation_checkpointing" not in model:
        model = dict(model, activation_checkpointing="none")
    # files before --cross-entropy computed the full loss
    if isinstance(model, dict) and "cross_entropy" not in model:
        model = dict(model, cross_entropy="full")
    return model


def config_differences(base, new):
    hard, soft = [], []
    for k in SAME_TOP:
        if base.get(k) != new.get(k):
            hard.append(f"{k}: {base.get(k)!r} -> {new.get(k)!r}")
    bc, nc = base.get("config") or {}, new.get("config") or {}
    for k in SAME_CONFIG:
        b, n = bc.get(k, CONFIG_DEFAULTS.get(k)), nc.get(k, CONFIG_DEFAULTS.get(k))
        if k == "model":  # files before model.context had samples as long as the context
            b, n = model_with_context(b), model_with_context(n)
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


def argument_parser():
    """compare.py's command line; its defaults are the gate's rule (report_html.py reads them)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("baseline", metavar="BASELINE.json")
    ap.add_argument("new", metavar="NEW.json")
    ap.add_argument("--threshold-pct", type=float, default=10.0,
                    help="smallest median step-time change that counts, %% (default 10)")
    ap.add_argument("--cross-machine-threshold-pct", type=float, default=25.0,
                    help="the same between machines of different fingerprints, on time x "
                         "calibrated peak, %% (default 25)")
    ap.add_argument("--peak-mem-pct", type=float, default=5.0,
                    help="allowed peak-memory increase with --overlap on, %% (default 5)")
    ap.add_argument("--baseline-repeat", action="append", metavar="FILE",
                    help="another run of the baseline's configuration; per strategy the run "
                         "with the lowest median is compared (repeatable)")
    ap.add_argument("--new-repeat", action="append", metavar="FILE",
                    help="another run of NEW's configuration, likewise (repeatable)")
    ap.add_argument("--json", metavar="OUT",
                    help="also write the rows and the verdict as JSON to OUT")
    ap.add_argument("--min-time-s", type=float, default=1e-5,
                    help="timed changes below this many seconds never count (default 1e-5)")
    ap.add_argument("--allow-config-diff", action="store_true",
                    help="compare files whose experiment differs (warn instead of exit 2)")
    return ap


def main(argv):
    args = argument_parser().parse_args(argv)
    for v, flag in ((args.threshold_pct, "--threshold-pct"), (args.peak_mem_pct, "--peak-mem-pct"),
                    (args.cross_machine_threshold_pct, "--cross-machine-threshold-pct"),
                    (args.min_time_s, "--min-time-s")):
        if not math.isfinite(v) or v < 0:
            print(f"error: {flag} must be a non-negative number", file=sys.stderr)
            return 2
    try:
        base, new = load(args.baseline), load(args.new)
        least_disturbed(base, [load(f) for f in args.baseline_repeat or []])
        least_disturbed(new, [load(f) for f in args.new_repeat or []])
    except sbv.BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    args.same_machine = same_machine(base, new)
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
    print(machine_line(base, new))
    overlap = (base.get("config") or {}).get("overlap", True) is not False
    pct = args.threshold_pct if args.same_machine else args.cross_machine_threshold_pct
    print(f"rule: step time needs separated 95 % CIs of the median and > "
          f"max({pct:g}%, {fmt_s(args.min_time_s)}); bytes and model state "
          f"exact; peak memory +{args.peak_mem_pct if overlap else 0:g}%; ok -> failed status\n")

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
        rows += compare_strategy(name, b_by[name], n_by.get(name), args, overlap)
    print_table(rows)

    bad = [r for r in rows if r.regressed]
    notes = mfu_notes(base, new)
    for note in notes:
        print(f"\nnote: {note}")
    if args.json:
        keys = ["strategy", "metric", "baseline", "new", "change", "allowed", "verdict"]
        with open(args.json, "w") as f:
            json.dump({"regressed": bool(bad), "notes": notes,
                       "rows": [dict(zip(keys, r.cells)) for r in rows]}, f, indent=1)
    if bad:
        names = list(dict.fromkeys(r.cells[0] for r in bad))
        print(f"\nREGRESSION: {len(bad)} metric(s) in {len(names)} strategy(ies): "
              + ", ".join(f"{r.cells[0]}/{r.cells[1]}" for r in bad))
        return 1
    improved = sum(r.cells[6] == "improved" for r in rows)
    noisy = [r.cells[0] for r in rows if r.cells[6] == "noisy" and r.cells[1] != "tokens_per_s"]
    if noisy:
        print(f"\nnote: slower beyond the threshold but within the noise (more --steps to "
              f"decide): {', '.join(noisy)}")
    print(f"\nno regression ({len(rows)} rows compared, {improved} improved)")
    return 0


if __name__ == "__main__":
    sbv.ensure_system_python(["jsonschema"])
    sys.exit(main(sys.argv[1:]))
