#!/usr/bin/python3
# End-to-end tests of the `shardbench` command as a user runs it: the standalone --np launch,
# schema validation of a real run's output, the atomic write under SIGKILL, the exporters'
# output shape, and one-line usage errors with exit code 2. Usage: test_cli.py BUILD_DIR
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bad_inputs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else os.path.join(ROOT, "build")
SB = os.path.join(BUILD, "shardbench")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1", OMPI_MCA_mpi_yield_when_idle="1")


STRATEGIES = ["ddp", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op",
              "fsdp_hybrid_shard", "fsdp_hybrid_shard_zero2"]


def sb(*args, timeout=300):
    return subprocess.run([SB, *args], env=ENV, capture_output=True, text=True, timeout=timeout)


def load(path):
    with open(path) as f:
        return json.load(f)


def validate(path):
    return subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "results", "validate.py"), path],
                          capture_output=True, text=True)


class RunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sbcli")
        cls.out = os.path.join(cls.tmp, "run.json")
        # Standalone launch: no mpirun on the command line; shardbench starts the MPI job.
        cls.proc = sb("run", "--np", "4", "--ranks-per-node", "2", "--model", "tiny",
                      "--strategies", "all", "--steps", "2", "--warmup", "1", "--out", cls.out)

    def test_standalone_np_launch_runs_every_strategy(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        doc = load(self.out)
        self.assertEqual(doc["config"]["world_size"], 4)
        self.assertEqual(doc["config"]["num_nodes"], 2)
        self.assertEqual([r["status"] for r in doc["results"]], ["ok"] * 8)
        self.assertIn("fsdp_hybrid_shard", self.proc.stdout)  # the table
        self.assertIn("[8/8] fsdp_hybrid_shard_zero2", self.proc.stdout)  # progress lines

    def test_output_validates_against_schema(self):
        v = validate(self.out)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    def test_cpu_run_says_fp32_matmuls_and_has_no_device_memory(self):
        # The CPU device has no bf16 matmul: fp32 even for bf16-mixed; no GPU memory figures.
        out = os.path.join(self.tmp, "bf16.json")
        p = sb("run", "--model", "tiny", "--strategies", "ddp", "--precision", "bf16-mixed",
               "--steps", "1", "--warmup", "0", "--out", out, "--quiet")
        self.assertEqual(p.returncode, 0, p.stderr)
        # --quiet drops the progress lines only: the table and the file's path remain
        self.assertNotIn("[1/1]", p.stdout)
        self.assertNotIn("shardbench: tiny", p.stdout)
        self.assertRegex(p.stdout, r"strategy\s+tokens/s")
        self.assertRegex(p.stdout, r"\nddp\s+\d+")
        self.assertIn("results: " + out, p.stdout)
        for doc in (load(self.out), load(out)):
            self.assertEqual(doc["config"]["matmul_precision"], "fp32")
            for r in doc["results"]:
                self.assertIsNone(r["memory"]["device"])

    def test_strategies_agree_on_the_parameters(self):
        doc = load(self.out)
        sums = [r["param_checksum"] for r in doc["results"]]
        for s in sums:
            self.assertAlmostEqual(s, sums[0], delta=1e-5 * abs(sums[0]))

    def export(self, fmt, *files, tool=None):
        args = ["export", "--format", fmt, *files] + (["--tool", tool] if tool else [])
        p = sb(*args)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def variant(self):
        """The run's file with two knobs off their defaults and one strategy that ran out of
        memory (as a real oom is recorded: status and error only)."""
        doc = load(self.out)
        doc["config"]["bucket_mb"] = 10
        doc["config"]["overlap"] = False
        doc["results"][3] = {"strategy": "zero3", "status": "oom", "error": "rank 1: out of memory"}
        path = os.path.join(self.tmp, "variant.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    def test_export_bencher_shape(self):
        bmf = self.export("bencher", self.out)
        self.assertEqual(sorted(bmf), sorted(f"tiny/w4n2/fp32/{s}" for s in STRATEGIES))
        for bench, measures in bmf.items():
            self.assertEqual(measures["status"]["value"], 0)
            for m in ("step_time_s", "tokens_per_s", "mfu", "peak_bytes_per_rank",
                      "sent_bytes_inter"):
                v = measures[m]
                self.assertLessEqual(v["lower_value"], v["value"], (bench, m))
                self.assertLessEqual(v["value"], v["upper_value"], (bench, m))
            # the step time's bounds are the CI of the median: order statistics of the samples
            st = measures["step_time_s"]
            samples = sorted(next(r for r in load(self.out)["results"]
                                  if bench.endswith("/" + r["strategy"]))["step_time_s"]["samples"])
            self.assertEqual([st["lower_value"], st["upper_value"]], [samples[0], samples[-1]])
            self.assertEqual(measures["sent_bytes_inter"]["lower_value"],
                             measures["sent_bytes_inter"]["value"])

    def test_export_names_carry_knobs_and_keep_failed_strategies(self):
        bmf = self.export("bencher", self.out, self.variant())
        self.assertEqual(len(bmf), 16)  # two series per strategy: the knobs tell them apart
        oom = bmf["tiny/w4n2/fp32/bucket_mb=10,overlap=false/zero3"]
        self.assertEqual(oom, {"status": {"value": 1, "lower_value": 1, "upper_value": 1}})
        gb = self.export("gbench", self.variant())
        z3 = next(b for b in gb["benchmarks"] if b["name"].endswith("/zero3"))
        self.assertTrue(z3["error_occurred"])
        self.assertIn("out of memory", z3["error_message"])

    def test_export_github_action_benchmark_one_tool_per_file(self):
        names = {}
        for tool in ("bigger", "smaller"):
            gab = self.export("github-action-benchmark", self.out, self.variant(), tool=tool)
            self.assertIsInstance(gab, list)
            for e in gab:
                self.assertLessEqual(set(e), {"name", "unit", "value", "range", "extra"})
            names[tool] = {e["name"].rsplit(" ", 1)[1] for e in gab}
        self.assertEqual(names["bigger"], {"tokens_per_s", "mfu"})
        self.assertIn("status", names["smaller"])
        self.assertIn("step_time_s", names["smaller"])

    def test_export_google_benchmark_format(self):
        gb = self.export("gbench", self.out)
        self.assertEqual(gb["context"]["executable"], "shardbench")
        self.assertEqual(len(gb["benchmarks"]), 8)
        doc = load(self.out)
        for b, r in zip(gb["benchmarks"], doc["results"]):
            self.assertEqual(b["name"], "tiny/w4n2/fp32/" + r["strategy"])
            self.assertEqual(b["time_unit"], "ms")
            self.assertAlmostEqual(b["real_time"], r["step_time_s"]["median"] * 1e3)
            self.assertEqual(b["iterations"], 2)
            self.assertAlmostEqual(b["tokens_per_s"], r["throughput"]["tokens_per_s"])


class AtomicWriteTest(unittest.TestCase):
    def test_killed_run_leaves_a_complete_file_or_none(self):
        tmp = tempfile.mkdtemp(prefix="sbkill")
        out = os.path.join(tmp, "r.json")
        p = subprocess.Popen([SB, "run", "--np", "2", "--model", "tiny", "--strategies", "all",
                              "--steps", "400", "--warmup", "0", "--out", out, "--quiet"],
                             env=ENV, start_new_session=True)
        deadline = time.time() + 120
        while not os.path.exists(out) and time.time() < deadline:
            time.sleep(0.05)
        os.killpg(p.pid, signal.SIGKILL)  # mid-run, possibly mid-write
        p.wait()
        self.assertTrue(os.path.exists(out), "the first strategy's results should be on disk")
        doc = load(out)  # a complete JSON document, never a torn one
        self.assertGreaterEqual(len(doc["results"]), 1)
        self.assertEqual(validate(out).returncode, 0)


class FaultTest(unittest.TestCase):
    """A rank that exits or hangs at step 9 (strategy 5 of 8, two steps each) ends the job in
    bounded time, names the rank and the collective, and leaves the first four strategies'
    results intact; --resume then finishes the matrix without redoing them. A rank that runs
    out of memory there (one rank only, mid-step) fails that strategy alone: it is recorded as
    oom with that rank's message and the other seven still run."""

    def run_fault(self, kind):
        out = os.path.join(tempfile.mkdtemp(prefix="sbfault"), "r.json")
        t0 = time.time()
        p = sb("run", "--np", "4", "--ranks-per-node", "2", "--model", "tiny", "--steps", "2",
               "--warmup", "0", "--timeout-s", "5", "--inject-fault", "2:9:" + kind, "--out", out,
               "--quiet", timeout=120)
        return p, out, time.time() - t0

    def check(self, kind, needles):
        p, out, seconds = self.run_fault(kind)
        self.assertNotEqual(p.returncode, 0)
        self.assertLess(seconds, 60)
        for n in needles:
            self.assertIn(n, p.stderr + p.stdout)
        doc = load(out)
        self.assertEqual([r["strategy"] for r in doc["results"]], ["ddp", "zero1", "zero2", "zero3"])
        self.assertEqual(validate(out).returncode, 0)
        return out

    def test_hang(self):
        self.check("hang", ["[rank 2] injected fault: hang", "watchdog: ", "waiting on ring predecessor rank",
                            "--timeout-s"])

    def test_exit_then_resume(self):
        out = self.check("exit", ["[rank 2] injected fault: exit at step 9"])
        p = sb("run", "--np", "4", "--ranks-per-node", "2", "--model", "tiny", "--steps", "2",
               "--warmup", "0", "--out", out, "--resume")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.count("--resume"), 4)
        doc = load(out)
        self.assertEqual([r["status"] for r in doc["results"]], ["ok"] * 8)
        p = sb("run", "--np", "4", "--ranks-per-node", "2", "--model", "tiny", "--steps", "3",
               "--warmup", "0", "--out", out, "--resume")
        self.assertEqual(p.returncode, 2)
        self.assertIn("different configuration", p.stderr)

    def test_oom_on_one_rank_fails_only_that_strategy(self):
        p, out, seconds = self.run_fault("oom")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertLess(seconds, 60)
        self.assertNotIn("watchdog", p.stderr)
        doc = load(out)
        status = {r["strategy"]: r["status"] for r in doc["results"]}
        self.assertEqual(len(status), 8)
        self.assertEqual(status.pop("fsdp_full_shard"), "oom")
        self.assertEqual(set(status.values()), {"ok"})
        err = next(r["error"] for r in doc["results"] if r["strategy"] == "fsdp_full_shard")
        self.assertIn("rank 2: out of memory", err)
        self.assertIn("per-rank limit", err)
        self.assertEqual(validate(out).returncode, 0)


class UsageErrorTest(unittest.TestCase):
    def test_bad_input_is_one_clear_line_and_exit_2(self):
        for args, needle in bad_inputs.CASES:
            with self.subTest(args=args):
                p, out = bad_inputs.run_case(SB, args)
                self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                self.assertIn(needle, p.stderr)
                self.assertLessEqual(len(p.stderr.strip().splitlines()), 2, p.stderr)
                self.assertFalse(os.path.exists(out), "nothing may be written on a usage error")

    def test_export_rejects_foreign_and_corrupt_files(self):
        d = tempfile.mkdtemp()
        bad = os.path.join(d, "bad.json")
        for content in ("{not json", '{"suite": "other", "results": []}', "[1, 2]"):
            with open(bad, "w") as f:
                f.write(content)
            p = sb("export", "--format", "bencher", bad)
            self.assertEqual(p.returncode, 2, content)
            self.assertIn("export:", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
