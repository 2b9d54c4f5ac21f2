#!/usr/bin/python3
# `shardbench validate` against bench/published: every file cites its source and configuration;
# the held-out set meets its bounds (each |error| <= 30 %, median <= 15 %); the calibration set
# meets its median bound (10 %) and every point its 20 % bound except the deviations listed
# below with their reason, each still within 30 % and still outside 20 % (a fixed one must be
# taken off the list); every published run that trained is predicted to fit; every same-hardware
# ratio (ratios/) cites its source and its predicted ratio lies in its stated bound, and one
# outside its bound fails --check; --check's exit code agrees with the table; a bad file is one
# line, exit 2.
# Usage: test_validate.py BUILD_DIR
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else os.path.join(ROOT, "build")
SB = os.path.join(BUILD, "shardbench")
PUBLISHED = os.path.join(ROOT, "bench", "published")

# Calibration points outside their 20 % bound, with why (docs/predict.md).
KNOWN_OUTSIDE = {
    "ibm-fsdp-llama2-7b-h100":
        "predicted 25 % fast: the published H100 7B runs at a lower MFU (0.37) than the 13B "
        "(0.40), which no kernel or link constant of the model reproduces",
}


def validate(*args):
    return subprocess.run([SB, "validate", *args], capture_output=True, text=True, timeout=300)


class ValidateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = os.path.join(tempfile.mkdtemp(prefix="sbval"), "validation.json")
        cls.proc = validate("--dir", PUBLISHED, "--json", cls.out, "--check")
        with open(cls.out) as f:
            cls.doc = json.load(f)
        cls.runs = {r["id"]: r for r in cls.doc["runs"]}

    def test_every_file_cites_its_source_and_configuration(self):
        files = sorted(f for f in os.listdir(PUBLISHED) if f.endswith(".json"))
        self.assertEqual(len(files), len(self.runs))
        for name in files:
            with open(os.path.join(PUBLISHED, name)) as f:
                d = json.load(f)
            self.assertIn(d["set"], ("calibration", "held_out"), name)
            for k in ("title", "table", "year"):
                self.assertTrue(d["source"].get(k), f"{name}: source.{k}")
            self.assertTrue(d["source"].get("url") or d["source"].get("venue"), name)
            for k in ("model", "gpus", "cluster", "strategy", "batch_per_gpu", "seq",
                      "activation_checkpointing", "precision", "interconnect"):
                self.assertIn(k, d["config"], name)
            self.assertGreater(d["published"]["tokens_per_s_per_gpu"], 0, name)
        self.assertEqual(sum(r["set"] == "calibration" for r in self.runs.values()), 8)

    def test_held_out_within_bounds(self):
        errs = [abs(r["error"]) for r in self.runs.values() if r["set"] == "held_out"]
        self.assertGreaterEqual(len(errs), 5)
        for r in self.runs.values():
            if r["set"] == "held_out":
                self.assertLessEqual(abs(r["error"]), 0.30, r["id"])
        self.assertLessEqual(sorted(errs)[len(errs) // 2], 0.15)
        self.assertTrue(self.doc["sets"]["held_out"]["within_bounds"])

    def test_calibration_within_bounds_but_the_listed_deviations(self):
        self.assertLessEqual(self.doc["sets"]["calibration"]["median_abs_error"], 0.10)
        for r in self.runs.values():
            if r["set"] != "calibration":
                continue
            if r["id"] in KNOWN_OUTSIDE:
                self.assertGreater(abs(r["error"]), 0.20, r["id"] + " is fixed: unlist it")
                self.assertLessEqual(abs(r["error"]), 0.30, r["id"])
            else:
                self.assertLessEqual(abs(r["error"]), 0.20, r["id"])

    def test_ranges_hold_the_prediction_and_check_agrees_with_the_table(self):
        for r in self.runs.values():
            lo, hi = r["predicted_range"]
            self.assertLess(lo, r["predicted_tokens_per_s_per_gpu"], r["id"])
            self.assertGreater(hi, r["predicted_tokens_per_s_per_gpu"], r["id"])
        ok = all(s["within_bounds"] for s in self.doc["sets"].values())
        self.assertEqual(self.proc.returncode, 0 if ok else 1, self.proc.stdout[-2000:])
        self.assertIn("calibration", self.proc.stdout)

    def test_every_ratio_cites_its_source_and_lies_in_its_bound(self):
        ratios_dir = os.path.join(PUBLISHED, "ratios")
        files = sorted(f for f in os.listdir(ratios_dir) if f.endswith(".json"))
        rows = {r["id"]: r for r in self.doc["ratios"]}
        self.assertEqual(len(files), len(rows))
        self.assertGreaterEqual(len(rows), 3)
        for name in files:
            with open(os.path.join(ratios_dir, name)) as f:
                d = json.load(f)
            self.assertEqual(d["set"], "ratio", name)
            for k in ("title", "table", "year"):
                self.assertTrue(d["source"].get(k), f"{name}: source.{k}")
            for k in ("model", "gpus", "cluster", "batch_per_gpu", "seq", "activation_checkpointing",
                      "precision", "interconnect"):
                self.assertIn(k, d["config"], name)
            lo, hi = d["published"]["bound"]
            self.assertLessEqual(lo, d["published"]["ratio"], name)
            self.assertLessEqual(d["published"]["ratio"], hi, name)
            r = rows[d["id"]]
            self.assertEqual(r["bound"], [lo, hi], name)
            self.assertTrue(lo <= r["predicted_ratio"] <= hi,
                            f"{name}: predicted {r['predicted_ratio']:.3f} outside [{lo}, {hi}]")
            self.assertTrue(r["within_bound"], name)
            self.assertTrue(r["fits"], name + ": both sides of a published ratio trained")
        self.assertIn("ratios", self.proc.stdout)

    def test_every_published_run_that_trained_fits(self):
        for r in self.runs.values():
            self.assertTrue(r["fits"], r["id"] + f": predicted {r['predicted_peak_gib']:.1f} GiB")

    def test_a_ratio_outside_its_bound_fails_check(self):
        d = tempfile.mkdtemp(prefix="sbvalratio")
        for name in ("ibm-fsdp-llama2-7b-a100.json", "llm-foundry-mpt-7b-a100-8.json"):
            with open(os.path.join(PUBLISHED, name)) as f:
                run = json.load(f)
            run["config"]["cluster"] = os.path.normpath(
                os.path.join(PUBLISHED, run["config"]["cluster"]))
            with open(os.path.join(d, name), "w") as f:
                json.dump(run, f)
        os.makedirs(os.path.join(d, "ratios"))
        with open(os.path.join(PUBLISHED, "ratios", "fsdp-vs-zero3-granite7b-a100-4.json")) as f:
            ratio = json.load(f)
        with open(os.path.join(d, "ratios", "r.json"), "w") as f:
            json.dump(ratio, f)
        p = validate("--dir", d, "--check")
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr)
        ratio["published"].update({"ratio": 3.0, "bound": [2.9, 3.1]})  # no prediction says 3x
        with open(os.path.join(d, "ratios", "r.json"), "w") as f:
            json.dump(ratio, f)
        p = validate("--dir", d, "--check")
        self.assertEqual(p.returncode, 1, p.stdout[-2000:] + p.stderr)
        self.assertIn("outside bound", p.stdout)

    def test_a_bad_file_is_one_line_and_exit_2(self):
        d = tempfile.mkdtemp(prefix="sbvalbad")
        with open(os.path.join(d, "x.json"), "w") as f:
            json.dump({"id": "x", "set": "calibration", "published": {"tokens_per_s_per_gpu": 1},
                       "config": {"model": "no-such-model", "gpus": 8, "batch_per_gpu": 1,
                                  "cluster": "dgx-h100", "strategy": "ddp"}}, f)
        out = os.path.join(d, "never.json")
        p = validate("--dir", d, "--json", out)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("x.json", p.stderr)
        self.assertFalse(os.path.exists(out))
        p = validate("--dir", os.path.join(d, "missing"))
        self.assertEqual(p.returncode, 2, p.stderr)


if __name__ == "__main__":
    unittest.main()
