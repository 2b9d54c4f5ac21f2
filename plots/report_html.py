#!/usr/bin/python3
# Writes one self-contained static HTML page from shardbench results files: the plots (matplotlib
# SVG inlined), the results table, the phase breakdown, predicted-vs-measured residuals, the
# comparison against a baseline (compare.py's rule) and trends over dated nightly files. It
# measures and judges nothing of its own; `shardbench report` runs it.
"""Write an offline HTML report of shardbench results.

usage: python3 plots/report_html.py RESULTS.json [MORE.json ...] --out report.html
           [--labels A,B,...] [--baseline BASE.json] [--history DIR] [--trace-dir DIR]
           [--validation VALIDATION.json]

The last file is the run the tables describe (one row per strategy); every file is drawn in
the plots. --baseline adds compare.py's verdicts against that file; --history adds trends over
the dated results in DIR (results/nightly/*.json, ordered by created_utc); --trace-dir adds
the one-step timeline from `shardbench run --trace`; --validation adds the predictor's table
against published runs (`shardbench validate --json`). The page fetches nothing: charts are
inline SVG, styles and the self-check script inline. Exit 0 written; 2 bad input.
"""
import argparse
import html
import io
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "results"))
import compare  # noqa: E402
import plot_results as pr  # noqa: E402
import validate as sbv  # noqa: E402

MIB = float(1 << 20)
CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1250px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}
.REGRESSED{background:#fbd5d5}.improved{background:#d8f3d8}.bad{color:#a00}
.note{color:#555;font-size:12px}figure{margin:12px 0}svg{max-width:100%;height:auto}
"""
# Records every script error, failed resource and console.error into #sb-selfcheck, and any
# resource the page loaded (it must load none): what the headless-browser test reads.
SELF_CHECK = """
(function(){var errs=[];function note(m){errs.push(String(m));}
window.addEventListener('error',function(e){var t=e.target;
 note(t&&t!==window&&(t.src||t.href)?'failed resource: '+(t.src||t.href):'error: '+e.message);},true);
var ce=console.error;console.error=function(){note('console.error: '+
 Array.prototype.join.call(arguments,' '));ce.apply(console,arguments);};
window.addEventListener('load',function(){
 performance.getEntriesByType('resource').forEach(function(r){
  if(r.name.indexOf('data:')!==0)note('network request: '+r.name);});
 var rows=document.querySelectorAll('#results tbody tr').length;
 var el=document.getElementById('sb-selfcheck');
 el.setAttribute('data-rows',rows);el.setAttribute('data-errors',errs.length);
 el.textContent=errs.length?errs.join('\\n'):'ok';});})();
"""


def esc(v):
    return html.escape(str(v))


def num(v, fmtspec, scale=1.0):
    return "–" if v is None else format(v * scale, fmtspec)


def table(head, rows, table_id=None, row_class=None):
    tid = f' id="{table_id}"' if table_id else ""
    out = [f"<table{tid}><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) +
           "</tr></thead><tbody>"]
    for i, r in enumerate(rows):
        cls = f' class="{esc(row_class[i])}"' if row_class and row_class[i] else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>")
    return "".join(out) + "</tbody></table>"


def svg_of(fig):
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    text = buf.getvalue()
    return text[text.index("<svg"):]


def figures(plt, runs, names, trace_dir):
    """[(title, inline svg)]: every plot of plot_results.py, drawn as SVG instead of PNG."""
    out = []
    real_write = pr.write
    pr.write = lambda fig, _out, name: (name, svg_of(fig))
    try:
        plots = list(pr.PLOTS)
        if trace_dir:
            plots.append(lambda plt, runs, names, out: pr.plot_timeline(plt, trace_dir, out))
        with tempfile.TemporaryDirectory() as tmp:
            for fn in plots:
                try:
                    out.append(fn(plt, runs, names, tmp))
                except Exception as e:  # a plot that cannot be drawn is named, not fatal
                    out.append((getattr(fn, "__name__", "plot"),
                                f'<p class="bad">not drawn: {esc(type(e).__name__)}: '
                                f'{esc(e)}</p>'))
                finally:
                    plt.close("all")
    finally:
        pr.write = real_write
    return out


def faults_cell(r):
    """Minor + major page faults per measured step (max over ranks): median, max; flagged
    when a step is above the run's threshold. '–' for files written before they were counted."""
    f = (r.get("memory") or {}).get("page_faults_per_step")
    try:
        steps = [a + b for a, b in zip(f["minor"]["samples"], f["major"]["samples"])]
    except (TypeError, KeyError):
        return "–"
    if not steps:
        return "–"
    text = f"{statistics.median(steps):.0f}, {max(steps)}"
    return text if f.get("steady", True) else text + " (median above " + str(f["threshold"]) + ")"


def results_section(run, names):
    # Page faults per measured step beside the step time: a step that maps memory pays the
    # kernel's page-table work, so its time is not the strategy's alone (docs/measurement.md).
    head = ["strategy", "status", "tokens/s", "step s (median)", "faults/step (median, max)",
            "cache hit rate", "MFU", "peak MiB/rank", "intra MiB/step", "inter MiB/step",
            "collectives/step", "exposed s", "error"]
    rows = []
    for n in names:
        r = run.by_name.get(n)
        if r is None:
            continue
        g = lambda k: pr.get(r, k)  # noqa: E731
        rows.append([n, r.get("status"), num(g("throughput.tokens_per_s"), ".0f"),
                     num(g("step_time_s.median"), ".4f"), faults_cell(r),
                     num(g("memory.allocator.hit_rate"), ".1%"), num(g("throughput.mfu"), ".1%"),
                     num(g("memory.peak_bytes_per_rank"), ".1f", 1 / MIB),
                     num(g("comm.per_step.sent_bytes_intra"), ".1f", 1 / MIB),
                     num(g("comm.per_step.sent_bytes_inter"), ".1f", 1 / MIB),
                     num(g("comm.per_step.collectives"), ".0f"), num(g("comm.exposed_s"), ".4f"),
                     (r.get("error") or "")[:160]])
    return table(head, rows, "results")


def phases_section(run, names):
    head = ["strategy", "forward s", "backward s", "optimizer s", "exposed comm s", "other s",
            "step s", "comm busy s", "overlap"]
    rows = []
    for n in names:
        r = run.ok(n)
        if r is None or "phases" not in r:
            continue
        g = lambda k: pr.get(r, f"phases.median.{k}")  # noqa: E731
        rows.append([n] + [num(g(k), ".4f") for k in ("forward_s", "backward_s", "optimizer_s",
                                                      "exposed_comm_s", "other_s", "step_s",
                                                      "comm_busy_s")] +
                    [num(g("overlap_fraction"), ".0%")])
    return table(head, rows, "phases")


def residuals_section(run, names):
    head = ["strategy", "step s measured", "predicted", "residual", "ratio",
            "compute s (fwd+bwd+opt)", "predicted", "exposed comm s", "predicted",
            "peak ratio", "payload bytes ratio", "inter bytes ratio"]
    rows = []
    for n in names:
        r = run.ok(n)
        if r is None or "residuals" not in r:
            continue
        g = lambda k: pr.get(r, k)  # noqa: E731
        parts = [g(f"phases.median.{k}") for k in ("forward_s", "backward_s", "optimizer_s")]
        compute = None if None in parts else sum(parts)
        rows.append([n, num(g("step_time_s.median"), ".4f"),
                     num(g("prediction.step_time_s.predicted"), ".4f"),
                     num(g("residuals.residual.step_time_s"), "+.4f"),
                     num(g("residuals.ratio.step_time_s"), ".3f"), num(compute, ".4f"),
                     num(g("prediction.step_time_s.compute"), ".4f"),
                     num(g("phases.median.exposed_comm_s"), ".4f"),
                     num(g("prediction.step_time_s.comm_exposed"), ".4f"),
                     num(g("residuals.ratio.peak_bytes_per_rank"), ".3f"),
                     num(g("residuals.ratio.payload_bytes"), ".3f"),
                     num(g("residuals.ratio.sent_bytes_inter"), ".3f")])
    return table(head, rows, "residuals")


def validation_section(path):
    """`shardbench validate --json`'s table: predicted beside published, per set."""
    try:
        doc = json.loads(Path(path).read_text())
        runs, sets = doc["runs"], doc["sets"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f'<p class="bad">--validation {esc(path)}: not a validation file ({esc(e)})</p>'
    head = ["run", "set", "published tok/s/GPU", "predicted", "range", "error", "fits"]
    rows, cls = [], []
    for r in runs:
        lo, hi = r["predicted_range"]
        bound = sets.get(r["set"], {}).get("bound_each", 0)
        rows.append([r["id"], r["set"], num(r["published_tokens_per_s_per_gpu"], ".0f"),
                     num(r["predicted_tokens_per_s_per_gpu"], ".0f"), f"{lo:.0f}-{hi:.0f}",
                     num(r["error"], "+.1%"), "yes" if r["fits"] else "NO"])
        cls.append("REGRESSED" if abs(r["error"]) > bound else "")
    notes = "; ".join(f"{esc(k)}: median |error| {v['median_abs_error']:.1%} (bound "
                      f"{v['bound_median']:.0%}, each {v['bound_each']:.0%}), "
                      f"{'within' if v['within_bounds'] else 'OUTSIDE'} bounds"
                      for k, v in sets.items())
    return (table(head, rows, "validation", cls) +
            f'<p class="note">{notes}. Commit {esc(doc.get("git_commit"))}, '
            f'{esc(doc.get("created_utc"))}; sources in bench/published.</p>')


def baseline_section(base_path, new_doc):
    """compare.py's rows and verdicts (its defaults), or why the files cannot be compared."""
    try:
        base = compare.load(base_path)
    except sbv.BadInput as e:
        return f'<p class="bad">baseline not compared: {esc(e)}</p>'
    hard, soft = compare.config_differences(base, new_doc)
    notes = "".join(f'<p class="bad">different experiment: {esc(h)}</p>' for h in hard)
    notes += "".join(f'<p class="note">config differs: {esc(s)}</p>' for s in soft)
    if hard:
        return notes
    args = compare.argument_parser().parse_args([base_path, "-"])  # the gate's defaults
    args.same_machine = compare.same_machine(base, new_doc)  # else time x calibrated peak
    notes += f'<p class="note">{esc(compare.machine_line(base, new_doc))}</p>'
    overlap = (base.get("config") or {}).get("overlap", True) is not False
    new_by = compare.by_name(new_doc)
    rows = []
    for name, b in compare.by_name(base).items():
        rows += compare.compare_strategy(name, b, new_by.get(name), args, overlap)
    verdict = "REGRESSION" if any(r.regressed for r in rows) else "no regression"
    head = ["strategy", "metric", "baseline", "new", "change", "allowed", "verdict"]
    return (f"<p>{esc(base_path)}: <b>{verdict}</b> (compare.py's rule, threshold {args.threshold_pct:g} %)</p>" +
            notes + table(head, [r.cells for r in rows], "baseline",
                          [r.cells[6] for r in rows]))


def history_docs(history_dir):
    """Dated results files in DIR (latest.json and *-bench.json skipped), oldest first."""
    docs = []
    for p in sorted(Path(history_dir).glob("*.json")):
        if p.name == "latest.json" or p.name.endswith("-bench.json"):
            continue
        try:
            doc = sbv.load_results(str(p))
        except sbv.BadInput as e:
            print(f"warning: history: {e}", file=sys.stderr)
            continue
        docs.append((doc.get("created_utc") or p.stem, p.stem, doc))
    return sorted(docs, key=lambda d: d[0])


def trends_section(plt, history_dir):
    docs = history_docs(history_dir)
    if not docs:
        return f'<p class="note">no dated results in {esc(history_dir)}</p>'
    names = pr.strategy_names([pr.Run(stem, stem, d) for _, stem, d in docs])
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2))
    cmap = plt.get_cmap("tab10")
    labels = [stem for _, stem, _ in docs]
    for i, n in enumerate(names):
        for ax, key, scale in ((a1, "step_time_s.median", 1e3),
                               (a2, "throughput.tokens_per_s", 1.0)):
            ys = []
            for _, _, d in docs:
                r = compare.by_name(d).get(n)
                v = pr.get(r, key) if r and r.get("status") == "ok" else None
                ys.append(v * scale if v is not None else math.nan)
            ax.plot(range(len(docs)), ys, marker="o", markersize=3, color=cmap(i % 10), label=n)
    for ax, yl in ((a1, "median step time (ms)"), (a2, "tokens/s")):
        ax.set_xticks(range(len(docs)), labels, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
    a2.legend(fontsize=7, ncol=2)
    fig.suptitle(f"Trends over {len(docs)} dated runs in {history_dir}", fontsize=10)
    fig.tight_layout()
    svg = svg_of(fig)
    plt.close(fig)
    return f"<figure>{svg}</figure>"


def page(args, runs, names, plt):
    run = runs[-1]
    doc = run.doc
    parts = [f"<h1>shardbench report: {esc(run.label)}</h1>",
             f'<p>{esc(pr.config_line(doc))}<br><span class="note">created '
             f'{esc(doc.get("created_utc"))}, commit {esc(doc.get("git_commit"))}, host '
             f'{esc(doc.get("host"))}, backend {esc(doc.get("backend"))}, traffic '
             f'{esc(doc.get("traffic_accounting"))}</span></p>',
             "<h2>Results (one row per strategy)</h2>", results_section(run, names),
             "<h2>Phase breakdown (median s of the slowest rank per step)</h2>",
             phases_section(run, names),
             '<p class="note">exposed comm: compute thread blocked on communication; comm busy: '
             "the comm thread's time in collectives; overlap: share of busy time hidden behind "
             "compute. forward + backward + optimizer + exposed + other = step, per step.</p>",
             "<h2>Predicted vs measured</h2>", residuals_section(run, names)]
    if args.validation:
        parts += ["<h2>Predictor against published runs</h2>", validation_section(args.validation)]
    if args.baseline:
        parts += ["<h2>Against the baseline</h2>", baseline_section(args.baseline, doc)]
    if args.history:
        parts += ["<h2>Trends (nightly history)</h2>", trends_section(plt, args.history)]
    parts.append("<h2>Plots</h2>")
    for name, svg in figures(plt, runs, names, args.trace_dir):
        parts.append(f'<figure id="fig-{esc(Path(name).stem)}">{svg}</figure>')
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>shardbench report: {esc(run.label)}</title><style>{CSS}</style>"
            f"<script>{SELF_CHECK}</script></head><body>" + "".join(parts) +
            '<pre id="sb-selfcheck" class="note">checking…</pre></body></html>\n')


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", metavar="RESULTS.json")
    ap.add_argument("--out", required=True, help="the HTML file to write")
    ap.add_argument("--labels", help="comma-separated labels, one per file")
    ap.add_argument("--baseline", help="results file to compare the last file against")
    ap.add_argument("--history", help="folder of dated results files (nightly)")
    ap.add_argument("--trace-dir", help="folder of `shardbench run --trace` files")
    ap.add_argument("--validation", help="`shardbench validate --json` file: its table")
    args = ap.parse_args(argv)
    for flag, path in (("--history", args.history), ("--trace-dir", args.trace_dir)):
        if path and not Path(path).is_dir():
            print(f"error: {flag} {path}: not a folder", file=sys.stderr)
            return 2
    try:
        runs = pr.load_runs(args.files, args.labels.split(",") if args.labels else None)
    except sbv.BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    names = pr.strategy_names(runs)
    if not names:
        print("error: no strategies in the input", file=sys.stderr)
        return 2
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "svg.fonttype": "none"})
    text = page(args, runs, names, plt)
    out = Path(args.out)
    try:  # written beside and renamed: a reader never sees half a page
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out)
    except OSError as e:
        print(f"error: --out {out}: {e.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({len(text) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sbv.ensure_system_python(["matplotlib", "numpy", "jsonschema"])
    sys.exit(main(sys.argv[1:]))
