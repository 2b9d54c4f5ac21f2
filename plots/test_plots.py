#!/usr/bin/python3
# Tests the Python side of shardbench: results/schema.json + validate.py, plots/plot_results.py,
# plots/compare.py and plots/report_html.py, on synthetic results files from make_results() (no
# C++ build needed; the report in a browser: tests/cli/test_report_browser.py).
# Runs with `python3 plots/test_plots.py` (unittest); keep it under 30 s.
import contextlib
import copy
import importlib.util
import io
import json
import math
import random
import re
import statistics
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "results"))
import validate as sbv  # noqa: E402

sbv.ensure_system_python(["jsonschema", "matplotlib", "numpy"])
PY = sys.executable
VALIDATE = ROOT / "results" / "validate.py"
PLOT = ROOT / "plots" / "plot_results.py"
COMPARE = ROOT / "plots" / "compare.py"

ALL_STRATEGIES = ["ddp", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op",
                  "fsdp_hybrid_shard", "fsdp_hybrid_shard_zero2"]
EXPECTED_PNGS = ["throughput.png", "memory.png", "comm_bytes.png", "collectives.png",
                 "size_histogram.png", "throughput_vs_memory.png", "step_time.png", "loss.png",
                 "phases.png"]
REPORT = ROOT / "plots" / "report_html.py"
TABLE = ROOT / "plots" / "strategy_table.py"
CROSSOVER = ROOT / "plots" / "crossover.py"


def make_results(world=4, ranks_per_node=2, n_layer=4, n_embd=256, vocab=8192, seq_len=128,
                 batch_per_rank=4, steps=8, warmup=2, precision="fp32", seed=1,
                 step_scale=1.0, failed=None, strategies=ALL_STRATEGIES):
    """A valid kind-"run" results dict for `strategies`, numbers shaped by the closed forms
    of tests/closed_forms.h.

    failed: {strategy: "oom" | "error"} marks those strategies as failed.
    step_scale multiplies every step time (and divides throughput)."""
    failed = failed or {}
    rng = random.Random(seed)
    n, g = world, ranks_per_node
    m = n // g
    psi = 12 * n_layer * n_embd * n_embd + vocab * n_embd + seq_len * n_embd + 2 * n_embd
    psi_pad = -(-psi // n) * n
    root = vocab * n_embd + seq_len * n_embd + 2 * n_embd
    bp, bg, k = (4, 4, 8) if precision == "fp32" else (2, 2, 12)
    tokens = batch_per_rank * seq_len * n
    flops = 6 * psi * tokens
    act = batch_per_rank * seq_len * n_embd * 4 * 16 * n_layer
    ring = (n - 1) / n

    def shape(name):
        # (shards, group, granularity, state bytes (p, g, o), sent bytes per rank, kinds)
        if name == "ddp":
            return ([], "none", "bucket", (bp * psi, bg * psi, k * psi), 2 * ring * psi * bg,
                    [("all_reduce", "world", 4, psi * bg)])
        if name in ("zero1", "zero2"):
            shards = ["optimizer"] + (["grads"] if name == "zero2" else [])
            gr = bg * psi if name == "zero1" else bg * psi / n
            kinds = [("reduce_scatter", "world", 1 if name == "zero1" else 4, psi * bg),
                     ("all_gather", "world", 1, psi * bp)]
            return (shards, "world", "flat" if name == "zero1" else "bucket",
                    (bp * psi, gr, k * psi / n), ring * psi * (bg + bp), kinds)
        if name == "zero3":
            leaves = 4 * n_layer + 3
            return (["params", "grads", "optimizer"], "world", "tensor",
                    (bp * psi / n, bg * psi / n, k * psi / n), ring * psi * (2 * bp + bg),
                    [("all_gather", "world", 2 * leaves, 2 * psi * bp),
                     ("reduce_scatter", "world", leaves, psi * bg)])
        if name == "fsdp_full_shard":
            return (["params", "grads", "optimizer"], "world", "unit",
                    (bp * psi / n, bg * psi / n, k * psi / n),
                    ring * ((2 * psi - root) * bp + psi * bg),
                    [("all_gather", "world", 2 * n_layer + 1, (2 * psi - root) * bp),
                     ("reduce_scatter", "world", n_layer + 1, psi * bg)])
        if name == "fsdp_shard_grad_op":
            return (["grads", "optimizer"], "world", "unit",
                    (bp * psi / n, bg * psi / n, k * psi / n), ring * psi * (bg + bp),
                    [("all_gather", "world", n_layer + 1, psi * bp),
                     ("reduce_scatter", "world", n_layer + 1, psi * bg)])
        z2 = name.endswith("zero2")
        intra = (g - 1) / g * psi * ((1 if z2 else 2) * bp + bg)
        inter = 2 * (m - 1) / m * (psi / g) * bg
        return ((["grads", "optimizer"] if z2 else ["params", "grads", "optimizer"]), "intra",
                "unit", (bp * psi / g, bg * psi / g, k * psi / g), (intra, inter),
                [("all_gather", "intra", (1 if z2 else 2) * n_layer + 1, psi * bp),
                 ("reduce_scatter", "intra", n_layer + 1, psi * bg),
                 ("all_reduce", "inter", n_layer + 1, psi * bg / g)])

    results = []
    for name in strategies:
        if name in failed:
            kind = failed[name]
            msg = ("out of memory: tracker limit 1.00 GiB exceeded allocating 96.0 MiB "
                   "(gathered_params)" if kind == "oom"
                   else "rank 2: MPI_ERR_TRUNCATE in all_gather")
            results.append({"strategy": name, "status": kind, "error": msg})
            continue
        shards, group, gran, state, sent, kinds = shape(name)
        if isinstance(sent, tuple):
            intra_r, inter_r = sent
        else:  # ring over world in rank order: m of the n hops cross a node boundary
            intra_r, inter_r = sent * (n - m) / n, sent * m / n
        gathered = 0 if "params" not in shards else 2 * psi_pad / (n_layer + 1) * bp
        if name in ("fsdp_shard_grad_op", "fsdp_hybrid_shard_zero2"):
            gathered = psi * bp
        comm_buf = 25 * 2**20 if name in ("ddp", "zero2", "zero3") else 4 * 2**20
        minor = 5000 if name == "zero3" else 3
        breakdown = {"params": int(state[0]), "gathered_params": int(gathered),
                     "grads": int(state[1]), "optimizer": int(state[2]),
                     "activations": int(act), "comm_buffers": comm_buf,
                     "workspace": int(3 * 2**20)}
        peak = sum(breakdown.values())
        comm_s = (intra_r / 5e9 + inter_r / 1e9)
        exposed = comm_s * (0.3 if name != "zero3" else 0.6)
        base = (flops / n / 50e9 + exposed) * step_scale
        samples = [base * (1 + rng.gauss(0, 0.01)) for _ in range(steps - warmup)]
        srt = sorted(samples)
        med = srt[len(srt) // 2]
        p95 = srt[min(len(srt) - 1, math.ceil(0.95 * len(srt)) - 1)]
        by_kind, hist = [], {}
        for kname, grp, cnt, payload in kinds:
            t = payload / 4e9
            by_kind.append({"kind": kname, "group": grp, "count": cnt, "bytes": int(payload),
                            "time_s": t, "busbw_gbps": payload / t / 1e9 * ring})
            size = payload / cnt
            b = 1 << max(10, math.ceil(math.log2(max(size, 1))))
            hist[b] = hist.get(b, 0) + cnt
        loss0 = math.log(vocab)
        ex = exposed * step_scale
        busy = sum(b["time_s"] for b in by_kind)
        per_step = [{"rank": i % n, "forward_s": (x - ex) / 3, "backward_s": (x - ex) * 0.6,
                     "optimizer_s": (x - ex) / 15, "exposed_comm_s": ex, "other_s": 0.0,
                     "step_s": x, "comm_busy_s": busy,
                     "overlap_fraction": max(0.0, 1 - ex / busy) if busy else 0.0}
                    for i, x in enumerate(samples)]
        results.append({
            "strategy": name, "status": "ok", "padded_params": psi_pad,
            "description": {"shards": shards, "shard_group": group, "granularity": gran},
            "step_time_s": {"median": med, "p95": p95, "min": srt[0], "max": srt[-1],
                            "samples": samples},
            "throughput": {"tokens_per_s": tokens / med, "samples_per_s": tokens / seq_len / med,
                           "tflops": flops / med / 1e12,
                           "mfu": flops / med / (n * 100e9), "flop_formula": "6*N*tokens",
                           "peak_flops": n * 100e9},
            "memory": {"peak_bytes_per_rank": peak,
                       "model_state_bytes_per_rank": {"params": int(state[0]),
                                                      "grads": int(state[1]),
                                                      "optimizer": int(state[2])},
                       "breakdown_at_peak": breakdown, "rss_hwm_bytes": int(peak * 1.3),
                       # zero3 churns (above the threshold), the rest are steady
                       "page_faults_per_step": {
                           "minor": {"median": minor, "max": minor, "samples": [minor] * 3},
                           "major": {"median": 0, "max": 0, "samples": [0] * 3},
                           "threshold": 64, "steady": minor <= 64},
                       "allocator": {"reserved_bytes": int(peak * 1.1),
                                     "allocated_bytes": int(peak * 0.5),
                                     "reserved_peak_bytes": int(peak * 1.1),
                                     "measured_hits": 300, "measured_misses": 0,
                                     "measured_backing_frees": 0, "hit_rate": 1.0}},
            "comm": {"per_step": {"payload_bytes": int(sum(x[3] for x in kinds)),
                                  "sent_bytes_intra": int(intra_r * n),
                                  "sent_bytes_inter": int(inter_r * n),
                                  "sent_bytes_max_rank": int(intra_r + inter_r),
                                  "collectives": sum(x[2] for x in kinds)},
                     "by_kind": by_kind,
                     "size_histogram": [{"bucket_bytes_le": b, "count": c}
                                        for b, c in sorted(hist.items())],
                     "exposed_s": exposed * step_scale},
            "phases": {"source": "synthetic", "per_step": per_step,
                       "median": {k: sorted(p[k] for p in per_step)[len(per_step) // 2]
                                  for k in per_step[0] if k != "rank"}},
            "loss": [loss0 * (0.97 ** s) + 1e-6 * (s % 3) for s in range(steps)],
            "param_checksum": 1234.5678,
        })
    return {
        "schema_version": 1, "suite": "shardbench", "kind": "run",
        "created_utc": "2025-01-02T03:04:05Z", "git_commit": "0123abcd", "host": "testhost",
        "backend": "cpu-mpi", "traffic_accounting": "counted",
        "versions": {"mpi": "Open MPI 4.1.4", "blas": "OpenBLAS 0.3.21", "compiler": "GCC 12.2"},
        "config": {
            "model": {"name": "small", "n_layer": n_layer, "n_embd": n_embd, "n_head": 4,
                      "seq_len": seq_len, "vocab": vocab, "tied_head": True},
            "params": psi, "world_size": n, "ranks_per_node": g, "num_nodes": m,
            "batch_per_rank": batch_per_rank, "seq_len": seq_len, "precision": precision,
            "wrap": "block", "steps": steps, "warmup": warmup, "bucket_mb": 25.0,
            "backward_prefetch": "pre", "forward_prefetch": False, "limit_all_gathers": True,
            "overlap": True, "collectives": "ring", "prefetch_elements": 50_000_000,
            "persist_elements": 100_000, "mem_limit_gb": 0, "seed": 1234, "lr": 3e-4,
            "device": "cpu"},
        "results": results,
    }


_modules = {}


def run(script, *args, subprocess_=False):
    """(exit status, stdout + stderr) of `script args`: in this process by default (fast),
    or as a real `python3 script` process when the process boundary itself is under test."""
    argv = [str(a) for a in args]
    if subprocess_:
        p = subprocess.run([PY, str(script), *argv], capture_output=True, text=True, timeout=120)
        return p.returncode, p.stdout + p.stderr
    if script not in _modules:
        spec = importlib.util.spec_from_file_location(f"sb_{script.stem}", script)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _modules[script] = mod
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            rc = _modules[script].main(argv)
        except SystemExit as e:  # argparse
            rc = e.code if isinstance(e.code, int) else 1
    return rc, out.getvalue()


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="sb_test_plots_")
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, doc):
        p = self.dir / name
        p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        return p


class SchemaTest(Base):
    def test_valid_file_passes(self):
        doc = make_results(failed={"zero3": "oom"})
        self.assertEqual(sbv.schema_errors(doc), [])
        self.assertEqual(sbv.consistency_errors(doc), [])
        rc, out = run(VALIDATE, self.write("ok.json", doc))
        self.assertEqual(rc, 0, out)

    def test_cuda_run_needs_cuda_versions(self):
        doc = make_results()
        doc["backend"] = "cuda-nccl"
        self.assertTrue(any("'cuda' is a required property" in e for e in sbv.schema_errors(doc)))

    def test_missing_keys_fail_with_path(self):
        cases = [
            (lambda d: d.pop("git_commit"), "$: 'git_commit' is a required property"),
            (lambda d: d["config"]["model"].pop("n_head"), "$.config.model: 'n_head'"),
            (lambda d: d["results"][3]["memory"].pop("breakdown_at_peak"),
             "$.results[3].memory (strategy zero3): 'breakdown_at_peak'"),
            (lambda d: d["results"][1]["comm"]["per_step"].pop("sent_bytes_inter"),
             "$.results[1].comm.per_step (strategy zero1): 'sent_bytes_inter'"),
            (lambda d: d["results"][0].pop("loss"), "'loss' is a required property"),
            (lambda d: d["results"][2].pop("error") if d["results"][2]["status"] != "ok"
             else d["results"][2].update(status="oom"), "'error' is a required property"),
        ]
        for mutate, expected in cases:
            doc = make_results()
            mutate(doc)
            errs = sbv.schema_errors(doc)
            self.assertTrue(any(expected in e for e in errs), (expected, errs))
        doc = make_results()
        doc["results"][4]["memory"].pop("peak_bytes_per_rank")
        rc, out = run(VALIDATE, self.write("bad.json", doc))
        self.assertEqual(rc, 1, out)
        self.assertIn("$.results[4].memory (strategy fsdp_full_shard): 'peak_bytes_per_rank'", out)

    def test_wrong_types_fail(self):
        doc = make_results()
        doc["results"][0]["memory"]["peak_bytes_per_rank"] = "12 MiB"
        doc["config"]["precision"] = "fp16"
        doc["results"][5]["step_time_s"]["samples"] = []
        errs = "\n".join(sbv.schema_errors(doc))
        self.assertIn("$.results[0].memory.peak_bytes_per_rank (strategy ddp)", errs)
        self.assertIn("$.config.precision", errs)
        self.assertIn("$.results[5].step_time_s.samples", errs)

    def test_failed_strategy_needs_only_status_and_error(self):
        doc = make_results(failed={"zero3": "oom", "ddp": "error"})
        self.assertEqual(sbv.schema_errors(doc), [])

    def test_consistency(self):
        doc = make_results()
        doc["config"]["num_nodes"] = 3
        doc["results"][1]["strategy"] = "ddp"
        errs = "\n".join(sbv.consistency_errors(doc))
        self.assertIn("world_size 4 != ranks_per_node 2 x num_nodes 3", errs)
        self.assertIn("strategy also at $.results[0]", errs)
        doc = make_results()
        doc["results"][0]["memory"]["page_faults_per_step"]["steady"] = False  # ddp: 3 faults
        doc["results"][3]["memory"]["page_faults_per_step"]["minor"]["max"] = 7  # zero3: 5000
        errs = "\n".join(sbv.consistency_errors(doc))
        self.assertIn("steady is False but the median step faults 3", errs)
        self.assertIn("(strategy zero3).minor: median/max 5000/7", errs)

    def test_corrupt_and_foreign_files_rejected_in_one_line(self):
        files = [self.write("trunc.json", json.dumps(make_results())[:500]),
                 self.write("other.json", {"suite": "nccl-tests", "results": []}),
                 self.write("list.json", [1, 2]),
                 self.write("empty.json", ""),
                 self.dir / "does_not_exist.json"]
        (self.dir / "bin.json").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
        files.append(self.dir / "bin.json")
        for f in files:
            rc, out = run(VALIDATE, f, subprocess_=True)
            self.assertEqual(rc, 1, out)
            self.assertNotIn("Traceback", out)
            self.assertEqual(len(out.strip().splitlines()), 1, out)
            self.assertIn(str(f), out)


class PlotTest(Base):
    def test_all_pngs_single_and_multi_file(self):
        a = self.write("base.json", make_results(failed={"zero3": "oom"}))
        b = self.write("new.json", make_results(seed=2, step_scale=1.1,
                                                failed={"fsdp_hybrid_shard": "error"}))
        for args, sub in (([a], "one"), ([a, b], "two")):
            out_dir = self.dir / sub
            rc, out = run(PLOT, *args, "--out", out_dir)
            self.assertEqual(rc, 0, out)
            for png in EXPECTED_PNGS:
                p = out_dir / png
                self.assertTrue(p.is_file(), f"{png} missing: {out}")
                self.assertEqual(p.read_bytes()[:8], b"\x89PNG\r\n\x1a\n")
                self.assertGreater(p.stat().st_size, 5000)

    def test_phases_plot_draws_files_without_phases_too(self):
        old = make_results()
        for r in old["results"]:
            del r["phases"]  # written before phases existed: total-only bars, no crash
        a = self.write("old.json", old)
        b = self.write("new.json", make_results(seed=2))
        rc, out = run(PLOT, a, b, "--out", self.dir / "p")
        self.assertEqual(rc, 0, out)
        self.assertTrue((self.dir / "p" / "phases.png").is_file())

    def test_timeline_from_a_trace_dir(self):
        trace = self.dir / "trace"
        trace.mkdir()
        ev = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "ts": 0,
               "args": {"name": "rank 0"}}]
        for step in range(3):
            t0 = step * 1000.0
            ev += [{"name": f"step {step}", "ph": "X", "pid": 0, "tid": 1, "ts": t0, "dur": 900,
                    "args": {"step": step}},
                   {"name": "forward", "ph": "X", "pid": 0, "tid": 1, "ts": t0, "dur": 300,
                    "args": {"step": step}},
                   {"name": "backward", "ph": "X", "pid": 0, "tid": 1, "ts": t0 + 300,
                    "dur": 500, "args": {"step": step}},
                   {"name": "wait all_reduce", "ph": "X", "pid": 0, "tid": 1, "ts": t0 + 700,
                    "dur": 100, "args": {"step": step, "seq": step}},
                   {"name": "all_reduce", "ph": "X", "pid": 0, "tid": 2, "ts": t0 + 500,
                    "dur": 300, "args": {"step": step, "seq": step, "kind": "all_reduce"}}]
        (trace / "ddp.trace.json").write_text(json.dumps({"traceEvents": ev}))
        a = self.write("r.json", make_results(strategies=["ddp"]))
        rc, out = run(PLOT, a, "--trace-dir", trace, "--out", self.dir / "t")
        self.assertEqual(rc, 0, out)
        self.assertGreater((self.dir / "t" / "timeline.png").stat().st_size, 5000)
        empty = self.dir / "empty"
        empty.mkdir()
        rc, out = run(PLOT, a, "--trace-dir", empty, "--out", self.dir / "u")
        self.assertEqual(rc, 1, out)  # the other plots are written; the missing one is named
        self.assertIn("no *.trace.json", out)

    def test_html_report_has_one_row_per_strategy_and_fetches_nothing(self):
        a = self.write("base.json", make_results())
        b = self.write("new.json", make_results(seed=2, failed={"zero3": "oom"}))
        hist = self.dir / "hist"
        hist.mkdir()
        for day in ("20250101T000000Z", "20250102T000000Z"):
            (hist / f"{day}.json").write_text(json.dumps(make_results(seed=3)))
        out = self.dir / "r.html"
        rc, text = run(REPORT, b, "--baseline", a, "--history", hist, "--out", out)
        self.assertEqual(rc, 0, text)
        page = out.read_text()
        body = page[page.index('<table id="results">'):]
        body = body[:body.index("</table>")]
        self.assertEqual(body.count("<tr>") - 1, len(ALL_STRATEGIES))  # minus the header row
        self.assertIn("<td>oom</td>", body)
        self.assertIn("faults/step (median, max)", body)  # beside the step time
        self.assertIn("<td>3, 3</td>", body)
        self.assertIn('<table id="baseline">', page)
        self.assertIn('class="REGRESSED"', page)  # zero3 ok -> oom
        self.assertIn("Trends over 2 dated runs", page)
        self.assertNotIn("not drawn", page)
        self.assertNotRegex(page, r'(src|href)="(https?:)?//')

    def test_html_report_carries_the_validation_table(self):
        new = self.write("new.json", make_results(seed=2))
        runs = [{"id": "a", "set": "calibration", "published_tokens_per_s_per_gpu": 100.0,
                 "predicted_tokens_per_s_per_gpu": 105.0, "predicted_range": [90.0, 120.0],
                 "error": 0.05, "fits": True},
                {"id": "b", "set": "held_out", "published_tokens_per_s_per_gpu": 100.0,
                 "predicted_tokens_per_s_per_gpu": 140.0, "predicted_range": [120.0, 160.0],
                 "error": 0.40, "fits": False}]
        sets = {s: {"median_abs_error": e, "bound_each": b, "bound_median": m,
                    "within_bounds": ok, "runs": 1}
                for s, e, b, m, ok in (("calibration", 0.05, 0.2, 0.1, True),
                                       ("held_out", 0.4, 0.3, 0.15, False))}
        val = self.write("val.json", {"kind": "validation", "runs": runs, "sets": sets})
        out = self.dir / "v.html"
        rc, text = run(REPORT, new, "--validation", val, "--out", out)
        self.assertEqual(rc, 0, text)
        page = out.read_text()
        body = page[page.index('<table id="validation">'):]
        body = body[:body.index("</table>")]
        self.assertEqual(body.count("<tr"), 3)
        self.assertEqual(body.count('class="REGRESSED"'), 1)  # b: 40 % against a 30 % bound
        self.assertIn("<td>+40.0%</td>", body)
        self.assertIn("held_out: median |error| 40.0%", page)

    def test_corrupt_input_exits_2(self):
        bad = self.write("bad.json", "{\"suite\": \"shardbench\", ")
        rc, out = run(PLOT, bad, "--out", self.dir / "x", subprocess_=True)
        self.assertEqual(rc, 2, out)
        self.assertIn("not valid JSON", out)
        self.assertNotIn("Traceback", out)


def ci_halfwidth(samples):
    """Half the width of the median's 95 % interval, relative to the median."""
    spec = importlib.util.spec_from_file_location("compare_ci", COMPARE)
    cmp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cmp)
    lo, hi = cmp.median_ci95(samples)
    return (hi - lo) / 2 / statistics.median(samples)


class CompareTest(Base):
    def test_identical_pair_passes(self):
        a = self.write("a.json", make_results(failed={"zero3": "oom"}))
        rc, out = run(COMPARE, a, a)
        self.assertEqual(rc, 0, out)
        self.assertIn("no regression", out)

    def test_noise_only_passes(self):
        a = self.write("a.json", make_results(seed=1))
        b = self.write("b.json", make_results(seed=7, step_scale=1.01))
        rc, out = run(COMPARE, a, b)
        self.assertEqual(rc, 0, out)

    def test_step_time_regression_fails(self):
        a = self.write("a.json", make_results(seed=1))
        b = self.write("b.json", make_results(seed=2, step_scale=1.3))
        rc, out = run(COMPARE, a, b, "--threshold-pct", "5", subprocess_=True)
        self.assertEqual(rc, 1, out)
        self.assertIn("REGRESSED", out)
        self.assertIn("step_time_median_s", out)

    def on_machine(self, doc, fingerprint, peak_scale=1.0, time_scale=1.0, only=None):
        """`doc` as recorded on another machine: its fingerprint, its calibrated peak scaled by
        peak_scale and its step times by time_scale (for `only` strategies, else all)."""
        doc = copy.deepcopy(doc)
        doc["machine"] = {"fingerprint": fingerprint, "cpu_model": "test", "cores": 2,
                          "calibrated_peak_gflops": 100 * peak_scale}
        for r in doc["results"]:
            r["throughput"]["peak_flops"] *= peak_scale
            r["throughput"]["peak_basis"] = {"definition": "hardware", "devices": 1,
                                             "per_device_flops": 100e9 * peak_scale}
            if only is None or r["strategy"] in only:
                st = r["step_time_s"]
                st["samples"] = [x * time_scale for x in st["samples"]]
                for k in ("median", "p95", "min", "max"):
                    st[k] *= time_scale
                r["throughput"]["tokens_per_s"] /= time_scale
        return doc

    def test_other_machine_is_no_regression_but_a_real_slowdown_is(self):
        # The new machine calibrates at 1/1.4 of the baseline's peak and every step takes 1.4x
        # as long: the machine alone. Compared raw (same fingerprint, as before fingerprints)
        # that is a 40 % regression; with the fingerprints differing, time x calibrated peak
        # is unchanged: no regression, and the header says which comparison ran.
        base = self.on_machine(make_results(seed=1), "aaaa")
        slower_machine = self.on_machine(make_results(seed=2), "bbbb", 1 / 1.4, 1.4)
        rc, out = run(COMPARE, self.write("a.json", base), self.write("b.json", slower_machine))
        self.assertEqual(rc, 0, out)
        self.assertIn("different machines", out)
        self.assertIn("step_time_x_peak", out)
        same = copy.deepcopy(slower_machine)
        same["machine"]["fingerprint"] = "aaaa"
        rc, out = run(COMPARE, self.write("a.json", base), self.write("c.json", same))
        self.assertEqual(rc, 1, out)
        self.assertIn("compared raw", out)
        # A real slowdown on the other machine (ddp 1.5x on top of the machine's 1.4x, as
        # --bucket-mb 0.01 did to ddp in the runs) is still caught across machines;
        # exact metrics are compared as always.
        slowed = self.on_machine(slower_machine, "bbbb", 1.0, 1.5, only={"ddp"})
        rc, out = run(COMPARE, self.write("a.json", base), self.write("d.json", slowed))
        self.assertEqual(rc, 1, out)
        self.assertRegex(out, r"ddp\s+step_time_x_peak.*REGRESSED")
        more_bytes = copy.deepcopy(slower_machine)
        more_bytes["results"][1]["comm"]["per_step"]["payload_bytes"] += 1
        rc, out = run(COMPARE, self.write("a.json", base), self.write("e.json", more_bytes))
        self.assertEqual(rc, 1, out)
        self.assertRegex(out, r"payload_bytes.*REGRESSED")

    def test_a_new_count_of_devices_is_not_a_machine_change(self):
        # The same per-core speed and the same step times on another machine, but the new file
        # counts twice the devices in its total peak (peak_flops): a definition change, not a
        # slower machine. Scaling by the total would call it a 2x regression.
        base = self.on_machine(make_results(seed=1), "aaaa")
        new = self.on_machine(make_results(seed=1), "bbbb")
        for r in new["results"]:
            r["throughput"]["peak_flops"] *= 2
            r["throughput"]["peak_basis"]["devices"] = 2
        rc, out = run(COMPARE, self.write("a.json", base), self.write("b.json", new))
        self.assertEqual(rc, 0, out)
        self.assertNotIn("REGRESSED", out)
        self.assertIn("per-device peak", out)

    def test_bytes_increase_fails(self):
        base = make_results()
        new = copy.deepcopy(base)
        new["results"][3]["comm"]["per_step"]["sent_bytes_inter"] = int(
            base["results"][3]["comm"]["per_step"]["sent_bytes_inter"] * 1.02)
        rc, out = run(COMPARE, self.write("a.json", base), self.write("b.json", new))
        self.assertEqual(rc, 1, out)
        self.assertRegex(out, r"zero3\s+sent_bytes_inter.*REGRESSED")

    def test_memory_increase_and_status_change_fail(self):
        base = make_results()
        new = copy.deepcopy(base)
        new["results"][0]["memory"]["peak_bytes_per_rank"] += 10 * 2**20
        rc, out = run(COMPARE, self.write("a.json", base), self.write("b.json", new))
        self.assertEqual(rc, 1, out)
        self.assertRegex(out, r"ddp\s+peak_bytes_per_rank.*REGRESSED")
        new = make_results(failed={"zero2": "oom"})
        rc, out = run(COMPARE, self.write("a.json", base), self.write("c.json", new))
        self.assertEqual(rc, 1, out)
        self.assertRegex(out, r"zero2\s+status\s+ok\s+oom.*REGRESSED")

    def test_bad_input_exits_2(self):
        a = self.write("a.json", make_results())
        bad = self.write("bad.json", "not json at all")
        rc, out = run(COMPARE, a, bad, subprocess_=True)
        self.assertEqual(rc, 2, out)
        self.assertIn("not valid JSON", out)
        self.assertNotIn("Traceback", out)
        rc, out = run(COMPARE, a, self.dir / "missing.json")
        self.assertEqual(rc, 2, out)
        other = make_results(world=8, ranks_per_node=4)
        rc, out = run(COMPARE, a, self.write("w8.json", other))
        self.assertEqual(rc, 2, out)
        self.assertIn("world_size", out)


    def test_mfu_denominator_redefined_is_one_note_not_a_regression(self):
        # A file from before throughput.peak_basis divided the default matrix by 4 "devices"
        # (2 virtual nodes x 2 cores); the same run counted on the hardware divides by 2 cores:
        # MFU doubles with no change in speed.
        base = make_results()
        new = copy.deepcopy(base)
        for r in new["results"]:
            r["throughput"]["mfu"] *= 2
            r["throughput"]["peak_flops"] /= 2
            r["throughput"]["peak_basis"] = {"definition": "hardware", "devices": 2}
        report = self.dir / "report.json"
        rc, out = run(COMPARE, self.write("a.json", base), self.write("b.json", new),
                      "--json", report)
        self.assertEqual(rc, 0, out)
        self.assertEqual(out.count("MFU's denominator is defined differently"), 1, out)
        doc = json.loads(report.read_text())
        self.assertEqual(len(doc["notes"]), 1)
        mfu = [r for r in doc["rows"] if r["metric"] == "mfu"]
        self.assertEqual(len(mfu), len(base["results"]))
        self.assertEqual({r["verdict"] for r in mfu}, {"not compared"})
        # the note hides nothing else: a real slowdown under the new definition still fails
        slow = make_results(seed=2, step_scale=1.3)
        for r in slow["results"]:
            r["throughput"]["peak_basis"] = {"definition": "hardware", "devices": 2}
        rc, out = run(COMPARE, self.write("a.json", base), self.write("c.json", slow),
                      "--threshold-pct", "5")
        self.assertEqual(rc, 1, out)
        self.assertIn("MFU's denominator is defined differently", out)
        # one definition on both sides: MFU is compared (reported, not gated), no note
        rc, out = run(COMPARE, self.write("b.json", new), self.write("b2.json", new),
                      "--json", report)
        self.assertEqual(rc, 0, out)
        doc = json.loads(report.read_text())
        self.assertEqual(doc["notes"], [])
        self.assertEqual({r["verdict"] for r in doc["rows"] if r["metric"] == "mfu"}, {"info"})

    def recorded(self):
        """The committed baselines: real per-step samples of every nightly cell."""
        files = sorted((ROOT / "results" / "baseline").glob("*-np*-*.json"))
        self.assertGreaterEqual(len(files), 4)
        return [json.loads(f.read_text()) for f in files]

    def gate(self, base, new, name):
        """compare.py's exit status and its step-time verdict per strategy."""
        report = self.dir / "report.json"
        rc, out = run(COMPARE, self.write("base.json", base), self.write(name, new),
                      "--json", report)
        self.assertIn(rc, (0, 1), out)
        rows = json.loads(report.read_text())["rows"]
        return rc, {r["strategy"]: r["verdict"] for r in rows
                    if r["metric"] == "step_time_median_s"}, out

    def test_recorded_noise_never_regresses_and_a_20_percent_slowdown_is_caught(self):
        # On the real per-step samples of every committed cell: an "identical run" draws the
        # step times again (bootstrap, with replacement), five times — never a regression. The
        # same samples slowed by 20 % are never passed as ok: caught, or — where the recorded
        # spread is too wide to resolve 20 % — flagged "noisy"; and always caught where the
        # interval is tight (half-width < 4 % of the median).
        rng = random.Random(14)
        for doc in self.recorded():
            slow = copy.deepcopy(doc)
            for r in slow["results"]:
                if r.get("step_time_s"):
                    r["step_time_s"]["samples"] = [1.2 * x for x in r["step_time_s"]["samples"]]
                    r["step_time_s"]["median"] *= 1.2
            rc, verdicts, out = self.gate(doc, slow, "slow.json")
            for r in doc["results"]:
                v = verdicts[r["strategy"]]
                self.assertIn(v, ("REGRESSED", "noisy"), (r["strategy"], out))
                if ci_halfwidth(r["step_time_s"]["samples"]) < 0.04:
                    self.assertEqual(v, "REGRESSED", (r["strategy"], out))
            for trial in range(5):
                same = copy.deepcopy(doc)
                for r in same["results"]:
                    st = r.get("step_time_s")
                    if st:
                        st["samples"] = [rng.choice(st["samples"]) for _ in st["samples"]]
                        st["median"] = statistics.median(st["samples"])
                rc, verdicts, out = self.gate(doc, same, "same.json")
                self.assertEqual(rc, 0, out)
                self.assertNotIn("REGRESSED", verdicts.values(), out)

    def test_median_ci_is_the_order_statistic_interval(self):
        spec = importlib.util.spec_from_file_location("compare", COMPARE)
        cmp = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cmp)
        self.assertEqual(cmp.median_ci95([5, 1, 4, 2, 3]), (1, 5))  # n=5: 93.75 % at most
        self.assertEqual(cmp.median_ci95(list(range(1, 11))), (2, 9))  # 97.9 %
        self.assertEqual(cmp.median_ci95(list(range(1, 21))), (6, 15))  # 95.9 %
        # coverage of each interval by its definition: >= 95 %, and one rank narrower is not
        for n in range(6, 60):
            lo, _ = cmp.median_ci95(list(range(1, n + 1)))
            tail = sum(math.comb(n, k) for k in range(lo)) / 2 ** n
            self.assertLessEqual(tail, 0.025, n)
            self.assertGreater(tail + math.comb(n, lo) / 2 ** n, 0.025, n)

    def test_peak_memory_tolerance_and_exact_state(self):
        base = make_results()
        new = copy.deepcopy(base)
        new["results"][0]["memory"]["peak_bytes_per_rank"] = int(
            base["results"][0]["memory"]["peak_bytes_per_rank"] * 1.03)  # within the spread
        rc, out = run(COMPARE, self.write("a.json", base), self.write("b.json", new))
        self.assertEqual(rc, 0, out)
        base["config"]["overlap"] = new["config"]["overlap"] = False  # then peak is exact
        rc, out = run(COMPARE, self.write("a.json", base), self.write("b.json", new))
        self.assertEqual(rc, 1, out)
        self.assertRegex(out, r"ddp\s+peak_bytes_per_rank.*exact\s+REGRESSED")
        new = copy.deepcopy(make_results())
        new["results"][1]["memory"]["model_state_bytes_per_rank"]["optimizer"] += 4
        rc, out = run(COMPARE, self.write("a.json", make_results()), self.write("c.json", new))
        self.assertEqual(rc, 1, out)
        self.assertRegex(out, r"zero1\s+model_state_optimizer_bytes.*REGRESSED")

    def test_matmul_precision_is_part_of_the_experiment(self):
        # Files from before the key computed every matmul in fp32: missing == "fp32".
        old = make_results()
        old["config"].pop("matmul_precision", None)
        new = copy.deepcopy(old)
        new["config"]["matmul_precision"] = "fp32"
        rc, out = run(COMPARE, self.write("old.json", old), self.write("new.json", new))
        self.assertEqual(rc, 0, out)
        new["config"]["matmul_precision"] = "bf16"
        rc, out = run(COMPARE, self.write("old.json", old), self.write("bf16.json", new))
        self.assertEqual(rc, 2, out)
        self.assertIn("matmul_precision", out)


class StrategyTableTest(Base):
    def test_rows_carry_the_files_numbers(self):
        doc = make_results(failed={"zero3": "oom"})
        rc, out = run(TABLE, f"{self.write('r.json', doc)}=--overlap off", "--time")
        self.assertEqual(rc, 0, out)
        rows = {line.split(" | ")[0].strip("| `"): line.split(" | ")
                for line in out.splitlines()[2:]}
        self.assertEqual(list(rows), ALL_STRATEGIES)
        ddp = next(r for r in doc["results"] if r["strategy"] == "ddp")
        cells = rows["ddp"]
        self.assertEqual(cells[1], "--overlap off")
        self.assertEqual(float(cells[2]), round(ddp["comm"]["per_step"]["sent_bytes_intra"] / 2**20, 1))
        self.assertEqual(float(cells[5]), round(ddp["memory"]["peak_bytes_per_rank"] / 2**20, 1))
        self.assertTrue(cells[4].startswith(str(ddp["comm"]["per_step"]["collectives"])))
        self.assertEqual(float(cells[9]), round(ddp["step_time_s"]["median"], 3))
        self.assertIn("oom", rows["zero3"][2])

    def test_psi_rows_put_the_inter_node_bytes_in_the_papers_units(self):
        # One unit: a ring collective of the padded parameters in bf16, its M node-leaving hops
        # each carrying (N-1)/N of the buffer: M·(N-1)/N·Ψ·2 bytes summed over ranks.
        doc = make_results(strategies=["ddp", "zero3"])
        rc, out = run(TABLE, f"{self.write('r.json', doc)}=plain", "--psi")
        self.assertEqual(rc, 0, out)
        lines = out.splitlines()
        self.assertIn("inter in Ψ", lines[0])
        self.assertEqual(len(lines), 4)
        cfg = doc["config"]
        for line, result in zip(lines[2:], doc["results"]):
            cells = line.strip("|").split(" | ")
            inter = result["comm"]["per_step"]["sent_bytes_inter"]
            unit = (cfg["num_nodes"] * (cfg["world_size"] - 1) / cfg["world_size"]
                    * result["padded_params"] * 2)
            self.assertEqual(cells[0].strip(), "plain")
            self.assertEqual(float(cells[3]), round(inter / unit, 3))
            self.assertEqual(float(cells[8]), round(result["loss"][-1], 4))
            breakdown = result["memory"]["breakdown_at_peak"]
            self.assertEqual(float(cells[7]), round(breakdown.get("comm_buffers", 0) / 2**20, 1))

    def test_a_prediction_is_refused(self):
        rc, out = run(TABLE, self.write("p.json", {"kind": "prediction", "results": []}))
        self.assertEqual(rc, 2, out)
        self.assertIn("prediction", out)


def with_network(doc, gbps, step_s, predicted_s):
    """doc as a --hosts netns run at `gbps` (None: unshaped): a topology as ci/two_host.sh
    writes it, each result's median step time and embedded prediction set from the dicts."""
    rate = (gbps or 8) * 1e9 / 8 * 0.95 * 1448 / 1514
    doc["topology"] = {
        "hosts": "netns", "num_hosts": 2, "ranks_per_host": 2,
        "shaping": {"qdisc": "tbf", "requested_gbps": gbps, "requested_bytes_per_s": gbps * 1e9 / 8,
                    "burst_bytes": 65536, "delay_ms": None} if gbps else None,
        "probe": {"paths": [{"from": 0, "to": 1, "bytes": 1, "seconds": 1, "rate_bytes_per_s": rate,
                             "rtt_s": 3e-5, "rtt_min_s": 2e-5}]},
        "achieved_bytes_per_s": rate, "achieved_gbps": rate * 8 / 1e9, "rtt_s": 2e-5,
        "prediction_inter": {"bw_bytes_per_s": rate, "latency_s": 1e-5, "per_rank": False}}
    if gbps:
        doc["topology"]["rate_to_requested"] = 0.95
    for r in doc["results"]:
        r["step_time_s"]["median"] = step_s[r["strategy"]]
        r["prediction"] = {"step_time_s": {"predicted": predicted_s[r["strategy"]]}}
    return doc


class CrossoverTest(Base):
    def docs(self):
        """Two rates of zero3/fsdp_full_shard/fsdp_hybrid_shard and of zero3 with ZeRO++."""
        out = []
        for gbps, k in [(0.2, 4.0), (None, 1.0)]:
            plain = make_results(strategies=["zero3", "fsdp_full_shard", "fsdp_hybrid_shard"])
            out.append(with_network(plain, gbps,
                                    {"zero3": 2 * k, "fsdp_full_shard": 2.2 * k,
                                     "fsdp_hybrid_shard": 1.1 * k + 1},
                                    {"zero3": 1.5 * k, "fsdp_full_shard": 1.6 * k,
                                     "fsdp_hybrid_shard": 0.9 * k}))
            zpp = make_results(strategies=["zero3"])
            zpp["config"].update(zero_hpz_partition_size=2, zero_quantized_weights=True,
                                 zero_quantized_gradients=True)
            out.append(with_network(zpp, gbps, {"zero3": 0.8 * k + 0.2}, {"zero3": 0.5 * k}))
        return out

    def test_pairs_and_plot(self):
        paths = [self.write(f"n{i}.json", d) for i, d in enumerate(self.docs())]
        for p in paths:
            self.assertEqual(sbv.schema_errors(json.loads(p.read_text())), [], p)
        png, js = self.dir / "crossover.png", self.dir / "c.json"
        rc, out = run(CROSSOVER, *paths, "--out", png, "--json", js)
        self.assertEqual(rc, 0, out)
        self.assertGreater(png.stat().st_size, 10_000)
        pairs = {(p["faster"], p["than"], p["requested_gbps"]): p
                 for p in json.loads(js.read_text())["pairs"]}
        # measured 2*4 / (0.8*4 + 0.2) at 0.2 Gb/s; unshaped 2 / 1.0; predicted 1.5*k / 0.5*k
        self.assertAlmostEqual(pairs[("zero3+zpp", "zero3", 0.2)]["measured_speedup"], 8 / 3.4)
        self.assertAlmostEqual(pairs[("zero3+zpp", "zero3", None)]["measured_speedup"], 2.0)
        self.assertAlmostEqual(pairs[("zero3+zpp", "zero3", 0.2)]["predicted_speedup"], 3.0)
        hyb = pairs[("fsdp_hybrid_shard", "fsdp_full_shard", 0.2)]
        self.assertAlmostEqual(hyb["measured_speedup"], 8.8 / 5.4)
        self.assertAlmostEqual(pairs[("fsdp_hybrid_shard", "fsdp_full_shard", None)]
                               ["measured_speedup"], 2.2 / 2.1)
        self.assertNotIn(("mics", "zero3", 0.2), pairs)  # no mics in these files

    def test_series_names_keep_zeropp_and_the_paper_schedule_apart(self):
        run(CROSSOVER, "--help")  # loads the module
        name = _modules[CROSSOVER].series_name
        zpp = dict(zero_hpz_partition_size=2, zero_quantized_weights=True,
                   zero_quantized_gradients=True)
        self.assertEqual(name({"strategy": "zero3"}, {}), "zero3")
        self.assertEqual(name({"strategy": "zero3"}, dict(zpp, zero_quantized_gradients=False)),
                         "zero3")  # two of three knobs: not the ZeRO++ series
        self.assertEqual(name({"strategy": "zero3"}, zpp), "zero3+zpp")
        self.assertEqual(name({"strategy": "zero3"}, dict(zpp, zero3_fetch="per_tensor")),
                         "zero3+zpp/paper")
        self.assertEqual(name({"strategy": "zero3"}, {"zero3_fetch": "per_tensor"}), "zero3/paper")
        self.assertEqual(name({"strategy": "mics"}, dict(zpp, zero3_fetch="per_tensor")), "mics")

    def test_rows_go_by_the_rate_asked_and_unshaped_last(self):
        # shaped at 10 Gb/s, the veth measures 9.1; unshaped only 7.3 (the CPU-bound veth)
        docs = [with_network(make_results(strategies=["zero3"]), gbps, {"zero3": 1.0},
                             {"zero3": 1.0}) for gbps in (None, 10, 0.2)]
        rc, out = run(CROSSOVER, *[self.write(f"o{i}.json", d) for i, d in enumerate(docs)],
                      "--out", self.dir / "o.png")
        self.assertEqual(rc, 0, out)
        asked = [line.split()[1] for line in out.splitlines() if line.startswith("zero3 ")]
        self.assertEqual(asked, ["0.2", "10", "unshaped"], out)

    def test_topology_needs_its_measured_keys(self):
        doc = self.docs()[0]
        del doc["topology"]["achieved_bytes_per_s"]
        self.assertTrue(any("achieved_bytes_per_s" in e for e in sbv.schema_errors(doc)))

    def test_files_without_topology_are_refused(self):
        rc, out = run(CROSSOVER, self.write("r.json", make_results()), "--out",
                      self.dir / "x.png")
        self.assertEqual(rc, 2, out)
        self.assertIn("no results of a --hosts netns run", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
