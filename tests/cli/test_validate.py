#!/usr/bin/python3
# `shardbench validate` against bench/published: every file cites its source and configuration;
# the held-out set meets its bounds (each |error| <= 30 %, median <= 15 %); the calibration set
# meets its median bound (10 %) and every point its 20 % bound except the deviations listed
# below with their reason, each still within 30 % and still outside 20 % (a fixed one must be
# taken off the list); --check's exit code agrees with the table; a bad file is one line, exit 2.
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
