#!/usr/bin/python3
# Renders shardbench results files (results/schema.json) to PNGs with matplotlib (Agg):
# throughput, memory breakdown, bytes intra/inter, collectives, size histograms, throughput vs
# memory, step-time spread, loss, the phase breakdown and (from --trace files) one step's
# timeline. Draws what a file holds; judging it is compare.py's job.
"""Plot shardbench results.

usage: python3 plots/plot_results.py RESULTS.json [MORE.json ...] --out plots/out
                                     [--labels A,B,...] [--dpi 110] [--trace-dir DIR]

Writes into --out:
  throughput.png            tokens/s (global) per strategy
  memory.png                peak memory per rank, stacked by category at the peak (MiB)
  comm_bytes.png            bytes sent per step, intra- vs inter-node, summed over ranks (MiB)
  collectives.png           collectives per step on one rank, stacked by kind
  size_histogram.png        collective payload size histogram, one panel per strategy
  throughput_vs_memory.png  tokens/s against peak memory per rank, labelled points
  step_time.png             step-time samples per strategy (box plots, ms)
  loss.png                  loss per step per strategy, and its distance from ddp
  phases.png                median step split into forward, backward, optimizer, exposed
                            communication and other (stacked, ms; the slowest rank's phases)
  timeline.png              with --trace-dir (the folder of `shardbench run --trace`): one
                            measured step of rank 0 per strategy, compute and comm lanes

With several files, bars are grouped per strategy, one bar per file (label = file name
without .json, or --labels). Strategies that failed (oom / error) keep their slot, marked
with their status, and their errors are listed under the figure.
Exit status: 0 all plots written; 1 some plot failed; 2 unreadable / foreign input.
"""
import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "results"))
import validate as sbv  # noqa: E402

MIB = float(1 << 20)
STRATEGY_ORDER = ["ddp", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op",
                  "fsdp_hybrid_shard", "fsdp_hybrid_shard_zero2", "fsdp2", "fsdp2_hsdp", "mics"]
MEM_CATEGORIES = [  # (key in breakdown_at_peak, legend label, colour)
    ("params", "params", "#1f77b4"),
    ("gathered_params", "gathered params", "#aec7e8"),
    ("grads", "grads", "#ff7f0e"),
    ("optimizer", "optimizer state", "#2ca02c"),
    ("activations", "activations", "#d62728"),
    ("comm_buffers", "comm buffers", "#9467bd"),
    ("workspace", "workspace", "#8c8c8c"),
    ("secondary_params", "hpZ secondary params", "#c5b0d5"),
]
KIND_COLOURS = {"all_reduce": "#1f77b4", "reduce_scatter": "#ff7f0e", "all_gather": "#2ca02c",
                "broadcast": "#9467bd", "barrier": "#8c8c8c", "reduce": "#d62728",
                "all_to_all": "#17becf"}
FILE_COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]
FILE_HATCHES = ["", "//", "..", "xx", "\\\\", "oo"]
FILE_MARKERS = ["o", "s", "^", "D", "v", "P"]
STATUS_TEXT = {"oom": "OOM", "error": "error", None: "not run"}


class Run:
    """One results file: its label, document and strategies by name."""

    def __init__(self, path, label, doc):
        self.path, self.label, self.doc = path, label, doc
        self.by_name = {}
        for r in doc.get("results") or []:
            if isinstance(r, dict) and isinstance(r.get("strategy"), str):
                self.by_name.setdefault(r["strategy"], r)

    def ok(self, name):
        r = self.by_name.get(name)
        return r if r is not None and r.get("status") == "ok" else None


def get(obj, dotted, default=None):
    """get(r, "memory.peak_bytes_per_rank") -> number, or default when missing / not a number."""
    for key in dotted.split("."):
        if not isinstance(obj, dict) or key not in obj:
            return default
        obj = obj[key]
    if isinstance(obj, bool) or not isinstance(obj, (int, float)) or not math.isfinite(obj):
        return default
    return obj


def load_runs(paths, labels):
    runs = []
    for i, path in enumerate(paths):
        doc = sbv.load_run_results(path)  # BadInput -> exit 2 in main
        try:
            problems = sbv.schema_errors(doc)
        except sbv.BadInput as e:  # jsonschema missing: plot anyway
            problems = [f"(schema not checked: {e})"]
        if problems and doc.get("results"):  # none: the caller's one-line refusal says so
            print(f"warning: {path}: {len(problems)} schema problem(s), plotting what is there; "
                  f"first: {problems[0]}", file=sys.stderr)
        label = labels[i] if labels and i < len(labels) else Path(path).stem
        runs.append(Run(path, label, doc))
    seen = {}
    for r in runs:  # keep labels distinct
        if r.label in seen:
            seen[r.label] += 1
            r.label = f"{r.label}#{seen[r.label]}"
        else:
            seen[r.label] = 1
    return runs


def strategy_names(runs):
    names = []
    for run in runs:
        for n in run.by_name:
            if n not in names:
                names.append(n)
    known = [s for s in STRATEGY_ORDER if s in names]
    return known + [s for s in names if s not in STRATEGY_ORDER]


def short_name(s):
    return s.replace("fsdp_", "fsdp\n").replace("hybrid_shard_zero2", "hybrid_shard\n_zero2")


def config_line(doc):
    c = doc.get("config") or {}
    m = c.get("model") or {}
    params = get(c, "params")
    psz = f", {params / 1e6:.1f}M params" if params else ""
    shape = (f"L{m.get('n_layer', '?')} d{m.get('n_embd', '?')} h{m.get('n_head', '?')}"
             f"{psz}")
    world = (f"world {c.get('world_size', '?')} = {c.get('num_nodes', '?')} nodes x "
             f"{c.get('ranks_per_node', '?')} ranks/node")
    batch = f"batch {c.get('batch_per_rank', '?')}x{c.get('seq_len', '?')}/rank"
    return (f"model {m.get('name', '?')} ({shape}) | {world} | {c.get('precision', '?')} | "
            f"{batch} | {doc.get('backend', '?')}")


def config_key(doc):
    c = doc.get("config") or {}
    return (str(c.get("model")), c.get("world_size"), c.get("ranks_per_node"),
            c.get("precision"), c.get("batch_per_rank"), c.get("seq_len"), doc.get("backend"))


def suptitle(fig, runs, what):
    line = config_line(runs[0].doc)
    if len({config_key(r.doc) for r in runs}) > 1:
        line = "configs differ between files: see legend labels  |  first: " + line
    fig.suptitle(f"{what}\n{line}", fontsize=11)


def failure_notes(runs, names):
    notes = []
    for name in names:
        for run in runs:
            r = run.by_name.get(name)
            if r is None:
                if len(runs) > 1:
                    notes.append(f"{name} [{run.label}]: not in this file")
                continue
            if r.get("status") != "ok":
                err = str(r.get("error") or "").replace("\n", " ")
                if len(err) > 110:
                    err = err[:107] + "..."
                tag = f" [{run.label}]" if len(runs) > 1 else ""
                notes.append(f"{name}{tag}: {r.get('status')}: {err}")
    return notes


def add_notes(fig, runs, names, extra=(), header="Missing / failed (shown as empty slots):"):
    notes = list(extra) + failure_notes(runs, names)
    if not notes:
        return 0.0
    if len(notes) > 6:
        notes = notes[:5] + [f"... and {len(notes) - 5} more"]
    text = header + "\n" + "\n".join("  " + n for n in notes)
    fig.text(0.01, 0.005, text, fontsize=8, va="bottom", ha="left", family="monospace",
             color="#a00000")
    return 0.025 * (len(notes) + 1) + 0.01


def layout(n_names, n_runs):
    """x position of (strategy i, file j) and the bar width: files side by side per strategy."""
    width = 0.8 / n_runs

    def x(i, j):
        return i - 0.4 + width * (j + 0.5)
    return x, width


def finish_axes(ax, names, runs, ylabel):
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([short_name(n) for n in names], fontsize=9)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def mark_missing(ax, x, run, name, y_frac=0.02):
    r = run.by_name.get(name)
    status = r.get("status") if r is not None else None
    text = STATUS_TEXT.get(status, str(status)) if r is None or status != "ok" else "no data"
    ax.text(x, y_frac, text, transform=ax.get_xaxis_transform(), rotation=90, ha="center",
            va="bottom", fontsize=8, color="#a00000", fontweight="bold")


def human(v, unit=""):
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{suf}{unit}"
    return f"{v:.3g}{unit}"


def human_bytes(b):
    for div, suf in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if b >= div:
            return f"{b / div:.4g} {suf}"
    return f"{int(b)} B"


def new_figure(plt, w=12, h=6.5):
    fig, ax = plt.subplots(figsize=(w, h))
    return fig, ax


def save(fig, out, name, bottom):
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return write(fig, out, name)


def write(fig, out, name):
    """The one place a figure is written (report_html.py draws the same figures as SVG)."""
    path = Path(out) / name
    fig.savefig(path)
    return path


# --- the plots ---------------------------------------------------------------------------------

def plot_throughput(plt, runs, names, out):
    fig, ax = new_figure(plt)
    x, w = layout(len(names), len(runs))
    for j, run in enumerate(runs):
        for i, name in enumerate(names):
            r = run.ok(name)
            v = get(r, "throughput.tokens_per_s") if r else None
            if v is None:
                mark_missing(ax, x(i, j), run, name)
                continue
            ax.bar(x(i, j), v, w * 0.92, color=FILE_COLOURS[j % len(FILE_COLOURS)],
                   label=run.label)
            mfu = get(r, "throughput.mfu")
            txt = human(v) + (f"\n{mfu * 100:.1f}% MFU" if mfu is not None else "")
            ax.annotate(txt, (x(i, j), v), ha="center", va="bottom", fontsize=7,
                        xytext=(0, 2), textcoords="offset points")
    finish_axes(ax, names, runs, "throughput (tokens/s, global)")
    ax.margins(y=0.15)
    _file_legend(ax, runs)
    suptitle(fig, runs, "Training throughput per strategy (higher is better)")
    return save(fig, out, "throughput.png", add_notes(fig, runs, names))


def _file_legend(ax, runs):
    if len(runs) > 1:
        handles, labels = ax.get_legend_handles_labels()
        uniq = dict(zip(labels, handles))
        ax.legend(uniq.values(), uniq.keys(), title="file", fontsize=8, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0))


def _file_hatch_handles(runs):
    from matplotlib.patches import Patch
    return [Patch(facecolor="white", edgecolor="black", hatch=FILE_HATCHES[j % len(FILE_HATCHES)],
                  label=f"file: {run.label}") for j, run in enumerate(runs)]


def _stacked(ax, runs, names, parts, value_fn, total_fn=None, total_label=None):
    """Stacked bars: parts = [(key, label, colour)], value_fn(result, key) -> MiB or None."""
    from matplotlib.patches import Patch
    x, w = layout(len(names), len(runs))
    used, differs = set(), False
    for j, run in enumerate(runs):
        hatch = FILE_HATCHES[j % len(FILE_HATCHES)] if len(runs) > 1 else ""
        for i, name in enumerate(names):
            r = run.ok(name)
            vals = [value_fn(r, key) if r else None for key, _, _ in parts]
            total = total_fn(r) if r is not None and total_fn else None
            if r is None or (all(v is None for v in vals) and total is None):
                mark_missing(ax, x(i, j), run, name)
                continue
            if all(v is None for v in vals):  # a total without its parts
                ax.bar(x(i, j), total, w * 0.92, color="#dddddd", edgecolor="#555555",
                       hatch=hatch)
                ax.annotate(f"{total:.4g}\n(total only)", (x(i, j), total), ha="center",
                            va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
                continue
            bottom = 0.0
            for (key, label, colour), v in zip(parts, vals):
                if not v:
                    continue
                ax.bar(x(i, j), v, w * 0.92, bottom=bottom, color=colour, hatch=hatch,
                       edgecolor="white" if not hatch else "#333333", linewidth=0.5)
                used.add(key)
                bottom += v
            total = total if total_fn else bottom
            if total is not None:
                if total_fn and abs(total - bottom) > 1e-6 * max(total, 1):
                    differs = True
                    ax.plot([x(i, j) - w * 0.46, x(i, j) + w * 0.46], [total, total],
                            color="black", linewidth=1.5)
                ax.annotate(f"{total:.4g}", (x(i, j), max(total, bottom)), ha="center",
                            va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
    handles = [Patch(facecolor=c, label=l) for k, l, c in parts if k in used]
    if total_label and differs:
        from matplotlib.lines import Line2D
        handles.append(Line2D([], [], color="black", linewidth=1.5, label=total_label))
    if len(runs) > 1:
        handles += _file_hatch_handles(runs)
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def plot_memory(plt, runs, names, out):
    fig, ax = new_figure(plt, 13)

    def part(r, key):
        v = get(r, f"memory.breakdown_at_peak.{key}")
        return None if v is None else v / MIB

    def total(r):
        v = get(r, "memory.peak_bytes_per_rank")
        return None if v is None else v / MIB
    _stacked(ax, runs, names, MEM_CATEGORIES, part, total,
             "peak per rank (max over ranks),\nwhere it differs from the stack")
    finish_axes(ax, names, runs, "peak memory per rank (MiB)")
    ax.margins(y=0.1)
    suptitle(fig, runs, "Peak memory per rank, broken down by category at the peak")
    return save(fig, out, "memory.png", add_notes(fig, runs, names))


def plot_comm_bytes(plt, runs, names, out):
    fig, ax = new_figure(plt, 13)
    parts = [("sent_bytes_intra", "intra-node", "#4c72b0"),
             ("sent_bytes_inter", "inter-node", "#c44e52")]

    def part(r, key):
        v = get(r, f"comm.per_step.{key}")
        return None if v is None else v / MIB
    _stacked(ax, runs, names, parts, part)
    finish_axes(ax, names, runs, "bytes sent per step, summed over ranks (MiB)")
    ax.margins(y=0.1)
    acct = {r.doc.get("traffic_accounting", "?") for r in runs}
    suptitle(fig, runs, "Bytes sent per training step: intra- vs inter-node "
             f"(traffic {'/'.join(sorted(acct))})")
    return save(fig, out, "comm_bytes.png", add_notes(fig, runs, names))


def _kind_groups(runs, names):
    """(kind, group) pairs present in comm.by_kind, in a stable order."""
    pairs = []
    for run in runs:
        for n in names:
            for e in get_list(run.ok(n), "comm.by_kind"):
                k, g = e.get("kind"), e.get("group")
                if isinstance(k, str) and (k, g) not in pairs:
                    pairs.append((k, g))
    korder = list(KIND_COLOURS)
    gorder = ["world", "intra", "inter", "partition", "replica", "partition_inter"]
    return sorted(pairs, key=lambda p: (korder.index(p[0]) if p[0] in korder else len(korder),
                                        p[0], gorder.index(p[1]) if p[1] in gorder else 3,
                                        str(p[1])))


def _shade(colour, group):
    """Same hue per kind; inter-node groups darker, intra-node lighter than world."""
    from matplotlib.colors import to_rgb
    r, g, b = to_rgb(colour)
    f = {"intra": 0.45, "inter": -0.35, "partition": 0.3, "replica": -0.2,
         "partition_inter": -0.5}.get(group, 0.0)
    if f >= 0:
        return (r + (1 - r) * f, g + (1 - g) * f, b + (1 - b) * f)
    return (r * (1 + f), g * (1 + f), b * (1 + f))


def get_list(obj, dotted):
    for key in dotted.split("."):
        if not isinstance(obj, dict):
            return []
        obj = obj.get(key)
    return [e for e in obj if isinstance(e, dict)] if isinstance(obj, list) else []


def plot_collectives(plt, runs, names, out):
    fig, ax = new_figure(plt, 13)
    pairs = _kind_groups(runs, names)
    extra = ["#17becf", "#bcbd22", "#e377c2"]
    parts = [((k, g), f"{k.replace('_', '-')} ({g})",
              _shade(KIND_COLOURS.get(k, extra[i % len(extra)]), g))
             for i, (k, g) in enumerate(pairs)]

    def part(r, key):
        es = [e for e in get_list(r, "comm.by_kind") if (e.get("kind"), e.get("group")) == key]
        vals = [get(e, "count") for e in es]
        return sum(v for v in vals if v is not None) if es else None

    def total(r):
        return get(r, "comm.per_step.collectives")
    _stacked(ax, runs, names, parts, part, total,
             "comm.per_step.collectives,\nwhere it differs from the stack")
    finish_axes(ax, names, runs, "collectives per step on one rank (count)")
    from matplotlib.ticker import MaxNLocator
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.margins(y=0.1)
    suptitle(fig, runs, "Collective calls per training step on one rank, by kind (group)")
    return save(fig, out, "collectives.png", add_notes(fig, runs, names))


def _bucket_label(b):
    for div, suf in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if b >= div:
            v = b / div
            return f"≤{v:.3g}{suf}"
    return f"≤{int(b)}"


def plot_size_histogram(plt, runs, names, out):
    buckets = set()
    for run in runs:
        for n in names:
            for e in get_list(run.ok(n), "comm.size_histogram"):
                b = get(e, "bucket_bytes_le")
                if b is not None:
                    buckets.add(int(b))
    buckets = sorted(buckets)
    if buckets and all(b > 0 and b & (b - 1) == 0 for b in buckets):  # fill power-of-2 gaps
        buckets = [1 << e for e in range(buckets[0].bit_length() - 1, buckets[-1].bit_length())]
    ncol = min(4, max(1, len(names)))
    nrow = max(1, math.ceil(len(names) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(4 * ncol + 1, 3.2 * nrow + 1.2), sharey=False,
                             squeeze=False)
    idx = {b: i for i, b in enumerate(buckets)}
    w = 0.8 / len(runs)
    for k, name in enumerate(names):
        ax = axes[k // ncol][k % ncol]
        ax.set_title(name, fontsize=10)
        drawn = False
        for j, run in enumerate(runs):
            r = run.ok(name)
            hist = get_list(r, "comm.size_histogram")
            xs, ys = [], []
            for e in hist:
                b, c = get(e, "bucket_bytes_le"), get(e, "count")
                b = int(b) if b is not None else None
                if b in idx and c is not None:
                    xs.append(idx[b] - 0.4 + w * (j + 0.5))
                    ys.append(c)
            if r is None or not hist:
                status = (run.by_name.get(name) or {}).get("status")
                why = STATUS_TEXT.get(status, str(status)) if r is None else "no histogram"
                ax.text(0.5, 0.6 - 0.12 * j, why if len(runs) == 1 else f"{run.label}: {why}",
                        transform=ax.transAxes, ha="center", color="#a00000", fontsize=10,
                        fontweight="bold")
                continue
            drawn = True
            ax.bar(xs, ys, w * 0.92, color=FILE_COLOURS[j % len(FILE_COLOURS)], label=run.label)
            for xx, yy in zip(xs, ys):
                ax.annotate(str(int(yy)), (xx, yy), ha="center", va="bottom", fontsize=6,
                            xytext=(0, 1), textcoords="offset points")
        if not drawn:
            ax.set_yticks([])
        else:
            from matplotlib.ticker import MaxNLocator
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        every = max(1, math.ceil(len(buckets) / 12))  # at most ~12 labels per panel
        ax.set_xticks(range(len(buckets)))
        ax.set_xticklabels([_bucket_label(b) if i % every == 0 else ""
                            for i, b in enumerate(buckets)], rotation=45, ha="right", fontsize=7)
        ax.set_xlim(-0.6, max(len(buckets), 1) - 0.4)
        ax.margins(y=0.15)
        ax.grid(axis="y", alpha=0.3)
        if k % ncol == 0:
            ax.set_ylabel("collectives per step")
        if k // ncol == nrow - 1:
            ax.set_xlabel("payload size bucket (bytes, upper bound)")
    for k in range(len(names), nrow * ncol):
        axes[k // ncol][k % ncol].axis("off")
    if len(runs) > 1:
        from matplotlib.patches import Patch
        fig.legend(handles=[Patch(color=FILE_COLOURS[j % len(FILE_COLOURS)], label=r.label)
                            for j, r in enumerate(runs)], loc="upper right", fontsize=8,
                   title="file")
    suptitle(fig, runs, "Collective payload sizes per step on one rank (histogram per strategy)")
    bottom = add_notes(fig, runs, names)
    fig.tight_layout(rect=(0, bottom, 1, 0.97))
    return write(fig, out, "size_histogram.png")


def _place_labels(fig, ax, points, fontsize=8):
    """Annotates points [(x, y, text, colour)] choosing, per label, the first offset whose box
    (estimated in pixels) overlaps no label placed before and no point."""
    fig.canvas.draw()
    to_px = ax.transData.transform
    scale = fig.dpi / 72.0
    char_w, line_h = 0.6 * fontsize * scale, 1.3 * fontsize * scale
    pts_px = [to_px((x, y)) for x, y, _, _ in points]
    placed = [(px - 5 * scale, py - 5 * scale, px + 5 * scale, py + 5 * scale)
              for px, py in pts_px]
    offsets = [(7, 5), (7, -13), (-7, 5), (-7, -13), (7, 17), (7, -25), (-7, 17), (-7, -25),
               (7, 29), (7, -37), (-7, 29), (-7, -37), (7, 41), (7, -49)]

    def overlaps(b):
        return any(b[0] < o[2] and o[0] < b[2] and b[1] < o[3] and o[1] < b[3] for o in placed)

    for (x, y, text, colour), (px, py) in zip(points, pts_px):
        w = char_w * len(text)
        chosen = offsets[0]
        for dx, dy in offsets:
            x0 = px + dx * scale if dx > 0 else px + dx * scale - w
            box = (x0, py + dy * scale, x0 + w, py + dy * scale + line_h)
            if not overlaps(box):
                chosen = (dx, dy)
                break
        dx, dy = chosen
        x0 = px + dx * scale if dx > 0 else px + dx * scale - w
        placed.append((x0, py + dy * scale, x0 + w, py + dy * scale + line_h))
        ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points",
                    fontsize=fontsize, color=colour, ha="left" if dx > 0 else "right",
                    va="bottom",
                    arrowprops=dict(arrowstyle="-", color=colour, lw=0.5, alpha=0.6)
                    if abs(dy) > 13 else None)


def plot_scatter(plt, runs, names, out):
    fig, ax = new_figure(plt, 11, 7)
    cmap = plt.get_cmap("tab10")
    colour = {n: cmap(i % 10) for i, n in enumerate(names)}
    points = []
    for j, run in enumerate(runs):
        first = True
        for name in names:
            r = run.ok(name)
            x, y = get(r, "memory.peak_bytes_per_rank"), get(r, "throughput.tokens_per_s")
            if x is None or y is None:
                continue
            ax.scatter([x / MIB], [y], s=70, color=colour[name], marker=FILE_MARKERS[j % 6],
                       edgecolor="black", linewidth=0.5, zorder=3,
                       label=f"file: {run.label}" if first else None)
            first = False
            points.append((x / MIB, y, name if len(runs) == 1 else f"{name} [{run.label}]",
                           colour[name]))
    ax.set_xlabel("peak memory per rank (MiB, max over ranks)")
    ax.set_ylabel("throughput (tokens/s, global)")
    ax.grid(alpha=0.3)
    ax.margins(x=0.25, y=0.15)
    if len(runs) > 1:
        ax.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 0.05))
    ax.text(0.99, 0.01, "better: up and to the left", transform=ax.transAxes, ha="right",
            va="bottom", fontsize=8, color="#555555")
    suptitle(fig, runs, "Throughput against peak memory per rank")
    bottom = add_notes(fig, runs, names, header="Missing / failed (not plotted):")
    fig.tight_layout(rect=(0, bottom, 1, 1))
    _place_labels(fig, ax, points)
    return write(fig, out, "throughput_vs_memory.png")


def plot_step_time(plt, runs, names, out):
    fig, ax = new_figure(plt)
    x, w = layout(len(names), len(runs))
    for j, run in enumerate(runs):
        data, pos = [], []
        for i, name in enumerate(names):
            r = run.ok(name)
            st = r.get("step_time_s") if r else None
            samples = [s for s in (st.get("samples") if isinstance(st, dict) else None) or []
                       if isinstance(s, (int, float)) and not isinstance(s, bool)]
            if not samples:
                mark_missing(ax, x(i, j), run, name)
                continue
            data.append([s * 1e3 for s in samples])
            pos.append(x(i, j))
        if data:
            c = FILE_COLOURS[j % len(FILE_COLOURS)]
            bp = ax.boxplot(data, positions=pos, widths=w * 0.8, patch_artist=True,
                            manage_ticks=False, showfliers=True)
            for b in bp["boxes"]:
                b.set(facecolor=c, alpha=0.6)
            for med in bp["medians"]:
                med.set(color="black")
            ax.plot([], [], "s", color=c, alpha=0.6, markersize=10, label=run.label)
    finish_axes(ax, names, runs, "step time (ms, max over ranks)")
    ax.margins(y=0.1)
    _file_legend(ax, runs)
    suptitle(fig, runs, "Step-time samples over measured steps (box: quartiles, line: median)")
    return save(fig, out, "step_time.png", add_notes(fig, runs, names))


def plot_loss(plt, runs, names, out):
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(14, 6))
    cmap = plt.get_cmap("tab10")
    styles = ["-", "--", ":", "-."]
    floor = 1e-12
    any_diff = False
    for j, run in enumerate(runs):
        ref = run.ok("ddp")
        ref_loss = ref.get("loss") if ref else None
        for i, name in enumerate(names):
            r = run.ok(name)
            loss = r.get("loss") if r else None
            if not isinstance(loss, list) or not loss:
                continue
            ys = [v if isinstance(v, (int, float)) else float("nan") for v in loss]
            lab = name if len(runs) == 1 else f"{name} [{run.label}]"
            ax.plot(range(len(ys)), ys, styles[j % 4], color=cmap(i % 10), label=lab,
                    marker="o", markersize=3, linewidth=1.2, alpha=0.85)
            if isinstance(ref_loss, list) and name != "ddp":
                n = min(len(ys), len(ref_loss))
                d = [abs(ys[t] - ref_loss[t]) if isinstance(ref_loss[t], (int, float)) else
                     float("nan") for t in range(n)]
                worst = max((v for v in d if v == v), default=float("nan"))
                ax2.plot(range(n), [max(v, floor) for v in d], styles[j % 4],
                         color=cmap(i % 10), label=f"{lab}: max {worst:.2g}", marker="o",
                         markersize=3, linewidth=1.2, alpha=0.85)
                any_diff = True
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title("loss per step (all strategies should agree)", fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, ncol=2)
    else:
        ax.text(0.5, 0.5, "no loss values in the input", ha="center", transform=ax.transAxes,
                color="#a00000")
    if any_diff:
        ax2.set_yscale("log")
        ax2.set_ylabel(f"|loss - loss(ddp)| (0 drawn at {floor:g})")
        ax2.legend(fontsize=7, ncol=2)
    else:
        ax2.text(0.5, 0.5, "no ddp result to compare against", ha="center",
                 transform=ax2.transAxes, color="#a00000")
    ax2.set_xlabel("step")
    ax2.set_title("distance from ddp in the same file", fontsize=10)
    ax2.grid(alpha=0.3)
    suptitle(fig, runs, "Loss parity across strategies")
    return save(fig, out, "loss.png", add_notes(fig, runs, names,
                                                header="Missing / failed (not plotted):"))


PHASES = [("forward_s", "forward", "#4c72b0"), ("backward_s", "backward", "#55a868"),
          ("optimizer_s", "optimizer", "#8172b3"), ("exposed_comm_s", "exposed comm", "#c44e52"),
          ("other_s", "other", "#bbbbbb")]


def plot_phases(plt, runs, names, out):
    fig, ax = new_figure(plt)

    def part(r, key):
        v = get(r, f"phases.median.{key}")
        return v * 1e3 if v is not None else None

    def total(r):
        v = get(r, "step_time_s.median")
        return v * 1e3 if v is not None else None
    _stacked(ax, runs, names, PHASES, part, total, "median step time")
    for j, run in enumerate(runs):  # the overlap fraction above each bar
        x, _ = layout(len(names), len(runs))
        for i, name in enumerate(names):
            ov = get(run.ok(name), "phases.median.overlap_fraction")
            if ov is not None:
                ax.annotate(f"{ov * 100:.0f}% hidden", (x(i, j), 0), ha="center", va="bottom",
                            fontsize=6, xytext=(0, 2), textcoords="offset points", color="white")
    finish_axes(ax, names, runs, "ms per step (median of each phase, slowest rank)")
    ax.margins(y=0.15)
    suptitle(fig, runs, "Where the step goes: compute phases and exposed communication")
    return save(fig, out, "phases.png", add_notes(fig, runs, names))


KIND_TRACE = {"all_reduce": "#1f77b4", "reduce_scatter": "#ff7f0e", "all_gather": "#2ca02c",
              "broadcast": "#9467bd", "barrier": "#7f7f7f", "reduce": "#d62728",
              "all_to_all": "#17becf"}
PHASE_TRACE = {"forward": "#4c72b0", "backward": "#55a868", "optimizer": "#8172b3",
               "step end": "#bbbbbb"}


def load_traces(trace_dir):
    """{strategy: trace document} for every <strategy>.trace.json in trace_dir."""
    traces = {}
    for path in sorted(Path(trace_dir).glob("*.trace.json")):
        traces[path.name[:-len(".trace.json")]] = json.loads(path.read_text())
    return traces


def one_step(doc, pid=0):
    """Rank pid's events of its middle traced step, times in ms from that step's start."""
    ev = [e for e in doc.get("traceEvents", []) if e.get("ph") == "X" and e.get("pid") == pid]
    steps = sorted({e["args"]["step"] for e in ev if "step" in e.get("args", {})})
    if not steps:
        return None, []
    step = steps[len(steps) // 2]
    ev = [e for e in ev if e.get("args", {}).get("step") == step]
    t0 = min(e["ts"] for e in ev if e["name"].startswith("step "))
    return step, [dict(e, ts=(e["ts"] - t0) / 1e3, dur=e["dur"] / 1e3) for e in ev]


def plot_timeline(plt, trace_dir, out):
    from matplotlib.patches import Patch
    traces = load_traces(trace_dir)
    names = [s for s in STRATEGY_ORDER if s in traces] + \
        [s for s in traces if s not in STRATEGY_ORDER]
    if not names:
        raise ValueError(f"no *.trace.json in {trace_dir}")
    fig, axes = plt.subplots(len(names), 1, figsize=(12, 1.1 * len(names) + 1.2), squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        step, ev = one_step(traces[name])
        for e in ev:
            if e["tid"] == 1 and e["name"] in PHASE_TRACE:
                ax.broken_barh([(e["ts"], e["dur"])], (1.1, 0.8), color=PHASE_TRACE[e["name"]])
            elif e["tid"] == 1 and e["name"].startswith("wait"):
                ax.broken_barh([(e["ts"], e["dur"])], (1.1, 0.8), color="#c44e52")
            elif e["tid"] in (2, 3):  # 3: the side comm stream, a thin bar under the main one
                ax.broken_barh([(e["ts"], e["dur"])], (0.1, 0.8) if e["tid"] == 2 else (0.0, 0.25),
                               color=KIND_TRACE.get(e["name"], "#333333"), edgecolor="white",
                               linewidth=0.3)
        ax.set_yticks([0.5, 1.5], ["comm", "compute"], fontsize=7)
        ax.set_ylim(0, 2)
        ax.set_ylabel(f"{name}\n(step {step})", rotation=0, ha="right", va="center", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("ms from the start of the step (rank 0)")
    handles = [Patch(color=c, label=k) for k, c in PHASE_TRACE.items()] + \
        [Patch(color="#c44e52", label="compute blocked on comm")] + \
        [Patch(color=c, label=k) for k, c in KIND_TRACE.items() if k != "barrier"]
    fig.legend(handles=handles, fontsize=7, ncol=5, loc="lower center")
    fig.suptitle("One measured step per strategy: compute and communication lanes (rank 0)",
                 fontsize=10)
    return save(fig, out, "timeline.png", 0.1)


PLOTS = [plot_throughput, plot_memory, plot_comm_bytes, plot_collectives, plot_size_histogram,
         plot_scatter, plot_step_time, plot_loss, plot_phases]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", metavar="RESULTS.json")
    ap.add_argument("--out", default="plots/out", help="output folder (default plots/out)")
    ap.add_argument("--labels", help="comma-separated labels, one per file")
    ap.add_argument("--dpi", type=int, default=110)
    ap.add_argument("--trace-dir", help="folder of `shardbench run --trace` files: timeline.png")
    args = ap.parse_args(argv)
    labels = args.labels.split(",") if args.labels else None
    try:
        runs = load_runs(args.files, labels)
    except sbv.BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    names = strategy_names(runs)
    if not names:
        print("error: no strategies in the input", file=sys.stderr)
        return 2
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"figure.dpi": args.dpi, "savefig.dpi": args.dpi, "font.size": 9,
                         "axes.titlesize": 10})
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"error: cannot create {out}: {e.strerror}", file=sys.stderr)
        return 2
    failed = 0
    plots = list(PLOTS)
    if args.trace_dir:
        plots.append(lambda plt, runs, names, out: plot_timeline(plt, args.trace_dir, out))
    for fn in plots:
        try:
            path = fn(plt, runs, names, out)
            print(f"wrote {path}")
        except Exception as e:  # one broken plot must not stop the others
            failed += 1
            print(f"error: {fn.__name__}: {type(e).__name__}: {e}", file=sys.stderr)
        finally:
            plt.close("all")
    return 1 if failed else 0


if __name__ == "__main__":
    sbv.ensure_system_python(["matplotlib", "numpy", "jsonschema"])
    sys.exit(main(sys.argv[1:]))
