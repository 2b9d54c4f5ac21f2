#!/usr/bin/python3
# The nightly loop as CI sees it: the default matrix's smallest cell, run by ci/matrix.py,
# compared with its committed baseline (results/baseline/<id>.json) by plots/compare.py — so a
# schema or config change that breaks the comparison fails here, not at night. Also the matrix
# file's rules: stable cell ids, resume, exclusions, bad files. Usage: test_matrix.py BUILD_DIR
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
BUILD = Path(sys.argv.pop(1)).resolve() if len(sys.argv) > 1 else ROOT / "build"
MATRIX = ROOT / "ci" / "matrix.py"
NIGHTLY = ROOT / "ci" / "matrix" / "nightly.toml"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1", OMPI_MCA_mpi_yield_when_idle="1")
_spec = importlib.util.spec_from_file_location("compare", ROOT / "plots" / "compare.py")
COMPARE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(COMPARE)
EXACT = ("payload_bytes", "sent_bytes_intra", "sent_bytes_inter", "model_state_params_bytes",
         "model_state_grads_bytes", "model_state_optimizer_bytes")


def matrix(*args, timeout=600):
    return subprocess.run(["/usr/bin/python3", str(MATRIX), *map(str, args), "--shardbench",
                           str(BUILD / "shardbench")], env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def cells(path):
    p = matrix(path, "--list")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


class DefaultMatrixTest(unittest.TestCase):
    def test_nightly_matrix_has_two_models_two_worlds_and_a_baseline_per_cell(self):
        listed = cells(NIGHTLY)
        self.assertGreaterEqual(len({c["flags"]["model"] for c in listed}), 2)
        self.assertGreaterEqual(len({(c["flags"]["np"], c["flags"]["ranks-per-node"])
                                     for c in listed}), 2)
        for c in listed:
            self.assertTrue((ROOT / "results" / "baseline" / f"{c['id']}.json").exists(), c["id"])

    def test_smallest_cell_compares_with_its_committed_baseline(self):
        smallest = min(cells(NIGHTLY), key=lambda c: (c["flags"]["model"] != "tiny",
                                                      int(c["flags"]["np"])))
        out = Path(tempfile.mkdtemp(prefix="sbmatrix"))
        p = matrix(NIGHTLY, "--cell", smallest["id"], "--out", out, "--baseline-dir",
                   ROOT / "results" / "baseline")
        # 0 or 1: the comparison was made (timing on a shared machine may differ; exit 2 means
        # the two files could not be compared or the cell failed, which is what this catches)
        self.assertIn(p.returncode, (0, 1), p.stdout[-3000:] + p.stderr[-3000:])
        index = json.loads((out / "index.json").read_text())
        self.assertEqual(index["kind"], "matrix-index")
        (entry,) = index["cells"]
        self.assertEqual(entry["id"], smallest["id"])
        self.assertEqual(set(entry["strategies"].values()), {"ok"})
        self.assertIn(entry["comparison"]["verdict"], ("ok", "REGRESSION"))
        report = json.loads((out / "compare" / f"{smallest['id']}.json").read_text())
        exact = [r for r in report["rows"] if r["metric"] in EXACT]
        n = len(json.loads((out / f"{smallest['id']}.json").read_text())["results"])
        self.assertEqual(len(exact), 6 * n)  # every strategy of the cell, each in the baseline
        for r in exact:  # deterministic: bytes and model state equal the baseline exactly
            self.assertEqual(r["verdict"], "same", r)
        # MFU: compared under one definition of the peak; a baseline recorded before the
        # hardware count gets one note per cell (and one in the summary), never a regression
        mfu = {r["verdict"] for r in report["rows"] if r["metric"] == "mfu"}
        self.assertIn(mfu, ({"info"}, {"not compared"}))
        notes = entry["comparison"].get("notes", [])
        self.assertEqual(len(notes), 1 if mfu == {"not compared"} else 0, notes)
        if notes:
            self.assertIn("note: MFU's denominator", p.stdout)
        # resume: a complete cell is kept, not rerun
        p = matrix(NIGHTLY, "--cell", smallest["id"], "--out", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads((out / "index.json").read_text())["cells"][0]["state"],
                         "kept")
        # and the index feeds the exporters
        e = subprocess.run([str(BUILD / "shardbench"), "export", "--format", "gbench",
                            str(out / "index.json")], capture_output=True, text=True)
        self.assertEqual(e.returncode, 0, e.stderr)
        benchmarks = json.loads(e.stdout)["benchmarks"]
        self.assertEqual(len(benchmarks), n)
        # the exporter's interval (C++) is the gate's (compare.py) on the same 20 samples
        doc = json.loads((out / f"{smallest['id']}.json").read_text())
        for b, r in zip(benchmarks, doc["results"]):
            lo, hi = COMPARE.median_ci95(r["step_time_s"]["samples"])
            self.assertEqual(len(r["step_time_s"]["samples"]), 20)
            self.assertAlmostEqual(b["real_time_ci95_ms"][0], lo * 1e3, places=9)
            self.assertAlmostEqual(b["real_time_ci95_ms"][1], hi * 1e3, places=9)


class ConfirmationTest(unittest.TestCase):
    def smallest(self):
        return min(cells(NIGHTLY), key=lambda c: (c["flags"]["model"] != "tiny",
                                                  int(c["flags"]["np"])))

    def test_a_reproduced_regression_stands_with_its_second_run(self):
        # A baseline five times faster than anything this machine runs: both runs regress.
        cell = self.smallest()
        doc = json.loads((ROOT / "results" / "baseline" / f"{cell['id']}.json").read_text())
        for r in doc["results"]:
            st = r["step_time_s"]
            for k, v in st.items():
                st[k] = [x / 5 for x in v] if isinstance(v, list) else v / 5
            r["throughput"] = {k: v * 5 if k.startswith("tokens") else v
                               for k, v in r["throughput"].items()}
        doc["machine"] = dict(doc.get("machine") or {}, fingerprint="another machine")
        base = Path(tempfile.mkdtemp(prefix="sbbase"))
        (base / f"{cell['id']}.json").write_text(json.dumps(doc))
        out = Path(tempfile.mkdtemp(prefix="sbmatrix"))
        p = matrix(NIGHTLY, "--cell", cell["id"], "--out", out, "--baseline-dir", base)
        self.assertEqual(p.returncode, 1, p.stdout[-3000:] + p.stderr[-3000:])
        (entry,) = json.loads((out / "index.json").read_text())["cells"]
        self.assertEqual(entry["comparison"]["verdict"], "REGRESSION")
        self.assertEqual(entry["comparison"]["confirmation"]["verdict"], "REGRESSION")
        # the baseline says it came from another machine: compared as time x calibrated
        # per-device peak (plots/compare.py), and a 5x slowdown is still caught
        self.assertIn(["ddp", "step_time_x_peak"],
                      entry["comparison"]["confirmation"]["regressed_in_both"])
        self.assertTrue((out / "confirm" / f"{cell['id']}.json").exists())
        self.assertTrue((out / "confirm" / f"{cell['id']}.compare.json").exists())

    def test_a_regression_the_second_run_does_not_reproduce_is_no_regression(self):
        spec = importlib.util.spec_from_file_location("matrix", MATRIX)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        # compare_cell writes its report: the first run regresses ddp's step time, the second
        # either nothing, or mics's (another strategy: noise again), or ddp's again.
        second = []
        def compare(baseline, out, report, pct):
            first = "confirm" not in str(report)
            rows = [("ddp", "step_time_median_s")] if first else second
            Path(report).parent.mkdir(parents=True, exist_ok=True)
            Path(report).write_text(json.dumps({"rows": [
                {"strategy": s, "metric": k, "verdict": "REGRESSED"} for s, k in rows]}))
            return ("REGRESSION", 1) if rows else ("ok", 0)
        m.compare_cell = compare
        m.run_cell = lambda *a: ("ran", 0, 0.0)
        args = m.argparse.Namespace(baseline_dir="/nonexistent", threshold_pct=10.0,
                                    no_confirm=False, shardbench="sb")
        out = Path(tempfile.mkdtemp(prefix="sbmatrix")) / "c.json"
        (out.parent / "confirm").mkdir()
        judged = m.judge_cell(args, "c", {}, out, [])
        self.assertEqual((judged["verdict"], judged["exit_code"]), ("ok", 0))
        self.assertEqual(judged["confirmation"]["verdict"], "ok")
        second[:] = [("mics", "step_time_median_s")]
        self.assertEqual(m.judge_cell(args, "c", {}, out, [])["exit_code"], 0)
        second[:] = [("ddp", "step_time_median_s")]
        judged = m.judge_cell(args, "c", {}, out, [])
        self.assertEqual((judged["verdict"], judged["exit_code"]), ("REGRESSION", 1))
        self.assertEqual(judged["confirmation"]["regressed_in_both"],
                         [["ddp", "step_time_median_s"]])
        args.no_confirm = True
        second[:] = []
        self.assertEqual(m.judge_cell(args, "c", {}, out, [])["exit_code"], 1)


class MatrixFileTest(unittest.TestCase):
    def write(self, text):
        path = Path(tempfile.mkdtemp(prefix="sbmf")) / "m.toml"
        path.write_text(text)
        return path

    def test_cell_id_depends_on_the_configuration_not_the_file(self):
        a = self.write('[run]\nsteps = 2\n[axes]\nmodel = ["tiny"]\nnp = [1, 2]\n'
                       'bucket-mb = [10.0, 25]\n')
        b = self.write('[axes]\nbucket-mb = [25, 10]\nnp = [2, 1]\n[run]\nmodel = "tiny"\n'
                       'steps = 2\n')
        ida, idb = {c["id"] for c in cells(a)}, {c["id"] for c in cells(b)}
        self.assertEqual(len(ida), 4)
        self.assertEqual(ida, idb)
        c = self.write('[run]\nsteps = 3\n[axes]\nmodel = ["tiny"]\nnp = [1, 2]\n'
                       'bucket-mb = [10, 25]\n')
        self.assertFalse(ida & {x["id"] for x in cells(c)})  # another knob: other ids

    def test_exclude_and_bare_flags(self):
        m = self.write('[run]\nmodel = "tiny"\nforward-prefetch = true\nuntied-head = false\n'
                       '[axes]\nworld = [{np = 2, ranks-per-node = 1}, {np = 4}]\n'
                       'precision = ["fp32", "bf16-mixed"]\n'
                       '[[exclude]]\nnp = 4\nprecision = "bf16-mixed"\n')
        listed = cells(m)
        self.assertEqual(len(listed), 3)
        self.assertNotIn({"np": "4", "precision": "bf16-mixed"},
                         [{k: c["flags"][k] for k in ("np", "precision")} for c in listed])

    def test_a_failed_cell_is_recorded_and_the_others_still_run(self):
        m = self.write('[run]\nmodel = "tiny"\nnp = 1\nstrategies = "ddp"\nsteps = 1\n'
                       'warmup = 0\n[axes]\nprecision = ["fp16", "fp32"]\n')
        out = m.parent / "out"
        p = matrix(m, "--out", out)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("--precision fp16: allowed fp32|bf16-mixed", p.stderr)
        cells_ = json.loads((out / "index.json").read_text())["cells"]
        self.assertEqual([(c["flags"]["precision"], c["state"]) for c in cells_],
                         [("fp16", "failed"), ("fp32", "ran")])
        self.assertEqual(cells_[1]["strategies"], {"ddp": "ok"})

    def test_every_committed_matrix_file_is_accepted_cell_by_cell(self):
        # A cell run refuses fails minutes into a sweep (network.toml's ZeRO++ cells once asked
        # for qgZ on fp32 gradients): --check puts every cell through predict's binding.
        files = sorted((ROOT / "ci" / "matrix").glob("*.toml"))
        self.assertGreaterEqual(len(files), 2)
        for path in files:
            p = matrix(path, "--check", timeout=900)
            self.assertEqual(p.returncode, 0, f"{path.name}: {p.stderr}")
            n = len(cells(path))
            self.assertIn(f"{n} of {n} cell(s) accepted", p.stdout)

    def test_check_names_a_refused_cell_and_what_run_would_say(self):
        # run trains fp32 by default, predict bf16-mixed: the check must use run's default.
        m = self.write('[run]\nmodel = "tiny"\nnp = 4\nstrategies = "zero3"\n'
                       'zero-quantized-gradients = "on"\n[axes]\n'
                       'zero-qgz-variant = ["shipped", "suite"]\n')
        p = matrix(m, "--check")
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        refused = [c["id"] for c in cells(m) if c["flags"]["zero-qgz-variant"] == "shipped"]
        self.assertIn(f"cell {refused[0]} refused", p.stderr)
        self.assertIn("on fp32 gradients", p.stderr)
        self.assertIn("1 of 2 cell(s) accepted", p.stdout)

    def test_bad_matrix_files_exit_2_with_one_line(self):
        for text, needle in (('[axes]\nmodel = "tiny"\n', "axes.model"),
                             ('[run]\nmodel = "tiny"\n', "no np"),
                             ('[run]\nnp = 1\nout = "x.json"\n', "set by the runner"),
                             ('[ranz]\nnp = 1\n', "unknown section"),
                             ('[run\n', "m.toml")):
            p = matrix(self.write(text), "--list")
            self.assertEqual(p.returncode, 2, text)
            self.assertIn(needle, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
