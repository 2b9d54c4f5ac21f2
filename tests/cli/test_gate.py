#!/usr/bin/python3
# Real runs against the nightly gate and the MFU denominator: identical runs never regress
# under plots/compare.py, a run slowed by 20 % (hidden flag --inject-slowdown, every step
# sleeps 0.2 x its own time) is always caught — five interleaved runs per side, of which
# compare.py keeps each side's least disturbed; the launcher's sgemm calibration agrees with
# one measured inside a rank, and --resume keeps a file's value; MFU at 4 ranks on virtual
# nodes divides by the physical cores and agrees with 1 rank's. Usage: test_gate.py BUILD_DIR
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
BUILD = Path(sys.argv.pop(1)).resolve() if len(sys.argv) > 1 else ROOT / "build"
SB = str(BUILD / "shardbench")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1", OMPI_MCA_mpi_yield_when_idle="1")
# One rank, ~1 ms steps (2 layers, width 64, 4 heads, context 32, vocabulary 512), 30 of
# them: other processes on a 2-core machine preempt whole time slices, which doubles a 5 ms
# step (measured: bimodal 4.8 / 9.3 ms, interval of the median ±36 %) but leaves most 1 ms
# steps whole (interval ±2-4 % under the same load). Two ranks would have to be scheduled
# together for every collective, which spread their steps over 4.5-40 ms.
MODEL = "2,64,4,32,512"
_spec = importlib.util.spec_from_file_location("compare", ROOT / "plots" / "compare.py")
COMPARE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(COMPARE)
TRIALS = 2   # comparisons per test
# A 20 % slowdown separates the intervals when each is narrower than about ±8 %; with ±5 % the
# check is certain. Wider than that (a machine loaded by other jobs: ±30 % was seen with four
# builds sharing 2 cores) no gate can tell the slowdown from the load, and the trial skips,
# saying so, rather than pass or fail by chance.
RESOLVABLE = 0.05
# Two processes of the same 1 ms configuration differ by far more than their per-step
# intervals: 8 interleaved runs on the idle machine gave zero2 medians of 1.05-1.58 ms (ddp
# 0.93-1.10), each interval tight: a per-process cost (where its pages and its time slices
# fall) that only the least disturbed of several runs sees past. 2 of those 8 came out more
# than 15 % above the fastest; with 3 runs a side, all of one side doing so (a false
# regression) has a chance of about (1/4)^3 = 1/64 per comparison, and happened in CI (zero2
# 1.016 vs 1.181 ms); with 5, about 1/1000. The test's bar is 15 %, below the injected 20 %
# (which sleep's overshoot makes ~25 %).
THRESHOLD = "15"
REPEATS = 5  # interleaved runs per side of one comparison
# The launcher's and a rank's calibration are two measurements of the same core; each is a
# median of 7 blocks of 60 ms. On a quiet machine they agree within a few per cent; the bound
# leaves room for a busy CI host without letting a multi-threaded or 10 ms figure (the old
# 52-371 GFLOP/s spread) pass.
PEAK_AGREEMENT = 0.25
# The triad's bandwidth against numpy's, as a factor either way: two loops of the same
# traffic (here, idle-ish: 10.9-11.7 vs 8.8-13.7 GB/s), but other jobs move a memory-bound
# figure more than a compute-bound one. Arrays left in cache (several times the DRAM figure)
# or a byte count off by 2x fall outside.
BW_AGREEMENT = 1.6


def numpy_add_bandwidth():
    """One thread's numpy.add(b, c, out=a) over three 32 MiB float32 arrays: median of 5
    blocks of >= 30 ms, 12 bytes per element (STREAM's count)."""
    import time
    import numpy as np
    # NumPy madvises huge pages for arrays of 4 MiB and more; the triad's std::vectors get the
    # kernel's default (4 KiB where transparent huge pages are "madvise", as here), and
    # hardware prefetchers stop at page boundaries: the same page size on both sides
    hugepage = getattr(np.core.multiarray, "_set_madvise_hugepage", None)
    if hugepage is not None:
        hugepage(False)
    n = 8 << 20
    a, b, c = np.zeros(n, np.float32), np.ones(n, np.float32), np.full(n, 2.0, np.float32)
    np.add(b, c, out=a)
    rates = []
    for _ in range(5):
        t0, calls = time.perf_counter(), 0
        while True:
            np.add(b, c, out=a)
            calls += 1
            s = time.perf_counter() - t0
            if s >= 0.03:
                break
        rates.append(12.0 * n * calls / s)
    return statistics.median(rates)


def run(out, *extra, launcher=True, env=ENV):
    args = ["run", "--model", MODEL, "--strategies", "ddp,zero2", "--steps", "30", "--warmup",
            "2", "--batch", "2", "--out", str(out), "--quiet", *extra]
    cmd = [SB, *args, "--np", "1"] if launcher else \
        ["mpirun", "-np", "1", "--oversubscribe", "--bind-to", "none", SB, *args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return json.loads(Path(out).read_text())


def compare(base, new):
    """compare.py on two lists of repeated runs (the first of each is the file, the others its
    --*-repeat files): exit status, verdict per (strategy, metric), printed table."""
    report = Path(tempfile.mkdtemp(prefix="sbgate")) / "report.json"
    args = [str(base[0]), str(new[0]), "--json", str(report), "--threshold-pct", THRESHOLD]
    args += [a for f in base[1:] for a in ("--baseline-repeat", str(f))]
    args += [a for f in new[1:] for a in ("--new-repeat", str(f))]
    p = subprocess.run(["/usr/bin/python3", str(ROOT / "plots" / "compare.py"), *args],
                       capture_output=True, text=True)
    assert p.returncode in (0, 1), p.stdout + p.stderr
    rows = json.loads(report.read_text())["rows"]
    return p.returncode, {(r["strategy"], r["metric"]): r["verdict"] for r in rows}, p.stdout


def halfwidth(files, strategy):
    """Half the width of the 95 % interval of the median of the least disturbed run (the one
    compare.py keeps), relative to that median."""
    runs = [r["step_time_s"]["samples"] for f in files
            for r in json.loads(Path(f).read_text())["results"] if r["strategy"] == strategy]
    samples = min(runs, key=statistics.median)
    lo, hi = COMPARE.median_ci95(samples)
    return (hi - lo) / 2 / statistics.median(samples)


def interleaved(tmp, b_flags):
    """REPEATS runs of the baseline and of B, alternating (A B A B ...), so a change of the
    machine's load during the trial reaches both sides alike."""
    a, b = [], []
    for i in range(REPEATS):
        a.append(tmp / f"a{i}.json")
        run(a[-1])
        b.append(tmp / f"b{i}.json")
        run(b[-1], *b_flags)
    return a, b


class GateTest(unittest.TestCase):
    def test_identical_runs_never_regress(self):
        for t in range(TRIALS):
            a, b = interleaved(Path(tempfile.mkdtemp(prefix=f"sbsame{t}")), [])
            rc, verdicts, out = compare(a, b)
            self.assertEqual(rc, 0, out)
            self.assertNotIn("REGRESSED", verdicts.values(), out)

    def test_injected_20_percent_slowdown_is_always_caught(self):
        for t in range(TRIALS):
            a, s = interleaved(Path(tempfile.mkdtemp(prefix=f"sbslow{t}")),
                               ["--inject-slowdown", "0.2"])
            noise = max(halfwidth(a, strategy) for strategy in ("ddp", "zero2"))
            if noise > RESOLVABLE:  # the machine's load, not the code, decides this trial
                self.skipTest(f"too loaded to resolve 20 %: the baseline's 95 % interval of the "
                              f"median is ±{noise:.0%} (needs ≤ ±{RESOLVABLE:.0%})")
            rc, verdicts, out = compare(a, s)
            self.assertEqual(rc, 1, out)
            for strategy in ("ddp", "zero2"):
                self.assertEqual(verdicts[(strategy, "step_time_median_s")], "REGRESSED", out)
                # what a slowdown must not touch: bytes and model state stay exact
                self.assertEqual(verdicts[(strategy, "sent_bytes_intra")], "same", out)
                self.assertEqual(verdicts[(strategy, "model_state_optimizer_bytes")], "same", out)


# Without the test command's calibration cache (ci/test.sh): every run measures.
MEASURING = {k: v for k, v in ENV.items() if k != "SB_CALIBRATION_CACHE"}


class PeakCalibrationTest(unittest.TestCase):
    def test_launcher_agrees_with_a_rank_and_resume_keeps_the_value(self):
        tmp = Path(tempfile.mkdtemp(prefix="sbpeak"))
        launcher = run(tmp / "launcher.json", env=MEASURING)["config"]["mfu_peak"]
        rank = run(tmp / "rank.json", launcher=False, env=MEASURING)["config"]["mfu_peak"]
        self.assertIn("measured by the launcher", launcher["source"])
        self.assertIn("measured by rank 0", rank["source"])
        for p in (launcher, rank):
            self.assertIn("1 BLAS thread", p["source"])
            # the same core's triad bandwidth (the embedded prediction's memory_bw_bytes_per_s):
            # between a slow laptop core's 1 GB/s and more than any DDR channel gives one core
            self.assertGreater(p["mem_bw_bytes_per_s"], 1e9)
            self.assertLess(p["mem_bw_bytes_per_s"], 200e9)
            self.assertEqual(p["repeats"], 7)
            self.assertLessEqual(p["min_flops"], p["per_device_flops"])
            self.assertLessEqual(p["per_device_flops"], p["max_flops"])
        ratio = launcher["per_device_flops"] / rank["per_device_flops"]
        self.assertLess(abs(ratio - 1), PEAK_AGREEMENT, (launcher, rank))
        # the triad against an independent one: numpy's add (STREAM "add", 12 bytes per
        # element too) on one thread over arrays of the same size, measured right after (and
        # up to twice more when a run disagrees: a memory-bound figure follows the machine's
        # load from one second to the next). Under other jobs (load average above the cores,
        # as after ctest's 4-rank entries: 18.3 GB/s triad against 37.7 numpy was seen there)
        # the two say more about the neighbours than about the triad: the comparison is
        # reported, not asserted, as the MFU ratio below is skipped
        loaded = os.getloadavg()[0] > physical_cores()
        numpy_bws = [numpy_add_bandwidth()]
        for p in (launcher, rank):
            def off():
                return min(max(p["mem_bw_bytes_per_s"] / b, b / p["mem_bw_bytes_per_s"])
                           for b in numpy_bws)
            while off() >= BW_AGREEMENT and len(numpy_bws) < 3:
                numpy_bws.append(numpy_add_bandwidth())
            if loaded:
                print(f"triad {p['mem_bw_bytes_per_s'] / 1e9:.1f} GB/s vs numpy "
                      f"{[round(b / 1e9, 1) for b in numpy_bws]}: not compared, load average "
                      f"{os.getloadavg()[0]:.1f}", file=sys.stderr)
                continue
            self.assertLess(off(), BW_AGREEMENT, (p["mem_bw_bytes_per_s"], numpy_bws))

        # --resume keeps the file's denominator: drop a strategy, resume, compare
        path = tmp / "launcher.json"
        doc = json.loads(path.read_text())
        doc["results"] = doc["results"][:1]
        doc["config"]["mfu_peak"]["per_device_flops"] = 12.5e9  # unmistakable
        path.write_text(json.dumps(doc))
        resumed = run(path, "--resume", env=MEASURING)
        self.assertEqual(resumed["config"]["mfu_peak"]["per_device_flops"], 12.5e9)
        for r in resumed["results"]:  # the calibration, then how the devices were counted
            self.assertTrue(r["throughput"]["peak_flops_source"].startswith(launcher["source"]))
        rerun = resumed["results"][1]  # zero2, measured again under the file's denominator
        self.assertEqual(rerun["throughput"]["peak_flops"], 12.5e9)  # 1 rank: 1 core


    def test_the_cache_is_measured_once_per_host_and_says_so(self):
        tmp = Path(tempfile.mkdtemp(prefix="sbcache"))
        cache = tmp / "calibration.json"
        env = dict(MEASURING, SB_CALIBRATION_CACHE=str(cache))
        first = run(tmp / "a.json", env=env)["config"]["mfu_peak"]
        self.assertIn("measured by the launcher", first["source"])
        self.assertNotIn("reused", first["source"])
        self.assertTrue(cache.exists())
        # a rank without a launcher reads the same file
        second = run(tmp / "b.json", launcher=False, env=env)["config"]["mfu_peak"]
        self.assertIn(f"reused from SB_CALIBRATION_CACHE={cache}", second["source"])
        for key in ("per_device_flops", "min_flops", "max_flops", "mem_bw_bytes_per_s",
                    "quantize_elems_per_s", "dequantize_int4_sum_elems_per_s"):
            self.assertAlmostEqual(second[key] / first[key], 1.0, places=4, msg=key)
        # another host's file, or a torn one, is measured again (and replaced)
        for content in (json.dumps(dict(json.loads(cache.read_text()), host="elsewhere")),
                        "{not json"):
            cache.write_text(content)
            again = run(tmp / "c.json", env=env)["config"]["mfu_peak"]
            self.assertNotIn("reused", again["source"])
            self.assertNotEqual(json.loads(cache.read_text())["host"], "elsewhere")
        # --peak-gflops is a fixed figure, never the cache's
        fixed = run(tmp / "d.json", "--peak-gflops", "50", env=env)["config"]["mfu_peak"]
        self.assertEqual(fixed["per_device_flops"], 50e9)


def physical_cores():
    """Distinct (package, core) pairs among the CPUs this process may use (as the run counts)."""
    cores = set()
    for c in os.sched_getaffinity(0):
        t = Path(f"/sys/devices/system/cpu/cpu{c}/topology")
        try:
            cores.add(((t / "physical_package_id").read_text().strip(),
                       (t / "core_id").read_text().strip()))
        except OSError:
            return os.cpu_count() or 1
    return len(cores)


# MFU of one model at 1 rank and at 4 oversubscribed ranks (2 virtual nodes x 2): the same
# cores do the same work per token, so the fractions of the real peak agree. ddp on `small` at
# batch 8: the all-reduce (~25 MB per rank per step at ~1.1 GB/s) is under 10 % of the step.
# Dividing by the topology's 4 "devices" on 2 cores gives a ratio of ~0.5, far outside.
MFU_AGREEMENT = 0.15


class MfuDenominatorTest(unittest.TestCase):
    def mfu_run(self, out, np_):
        p = subprocess.run([SB, "run", "--model", "small", "--strategies", "ddp", "--steps", "4",
                            "--warmup", "1", "--batch", "8", "--np", str(np_),
                            "--ranks-per-node", str(min(np_, 2)), "--out", str(out), "--quiet",
                            # one per-core figure for both sides: the ratio then tests the
                            # device count and the step times, not two calibrations' noise
                            "--peak-gflops", "100"],
                           env=ENV, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
        return json.loads(Path(out).read_text())["results"][0]["throughput"]

    def test_virtual_nodes_divide_by_the_physical_cores(self):
        tmp = Path(tempfile.mkdtemp(prefix="sbmfu"))
        cores = physical_cores()
        load_before = os.getloadavg()[0]
        one, four = [], []

        def ratio():  # least disturbed run per side: other load only lowers MFU
            return max(t["mfu"] for t in four) / max(t["mfu"] for t in one)

        # Interleaved pairs, so a change of load reaches both sides; one run per side varies by
        # about 10 % here even on an idle machine, so up to 6 pairs are drawn and the test stops
        # at the first agreement. The topology's denominator (4 "devices" on 2 cores) gives a
        # ratio near 0.5, which no number of pairs brings inside the bound.
        for i in range(6):
            one.append(self.mfu_run(tmp / f"one{i}.json", 1))
            four.append(self.mfu_run(tmp / f"four{i}.json", 4))
            if i >= 1 and abs(ratio() - 1) < MFU_AGREEMENT:
                break
        for tp, ranks in ((one[0], 1), (four[0], 4)):
            basis = tp["peak_basis"]
            self.assertEqual(basis["definition"], "hardware")
            self.assertEqual(basis["machines"], 1)  # virtual nodes are not machines
            self.assertEqual(basis["physical_cores"], cores)
            self.assertEqual(basis["devices"], min(ranks, cores))
            self.assertAlmostEqual(tp["peak_flops"], basis["per_device_flops"] * basis["devices"],
                                   delta=1e-6 * tp["peak_flops"])
            self.assertIn("distinct machine", tp["peak_flops_source"])
        if cores >= 4:
            self.skipTest(f"{cores} physical cores: 4 ranks are not oversubscribed here")
        if load_before > cores + 0.5:
            self.skipTest(f"load average {load_before:.1f} on {cores} cores before the runs: "
                          f"other jobs take the cores, so the MFU ratio is the machine's, not "
                          f"the denominator's (the denominator itself was checked above)")
        self.assertLess(abs(ratio() - 1), MFU_AGREEMENT,
                        f"MFU 4 ranks / 1 rank = {ratio():.3f} ({[t['mfu'] for t in four]} vs "
                        f"{[t['mfu'] for t in one]})")


# The run's embedded prediction against the run itself, on the default matrix's setting (small,
# 4 ranks as 2 virtual nodes x 2, batch 4), one strategy of each family: measured / predicted
# within 15 % (the bound). The prediction uses this run's own calibration (sgemm, the
# step's GEMM shapes, triad, collective latency), so it holds on any machine of this kind, not
# the one a preset was fitted on. Other jobs only slow the measurement, so each strategy keeps
# its least disturbed of up to 5 runs (one run of a strategy varies by ~10 % here); under other
# load the test skips before running.
PREDICTION_AGREEMENT = 0.15
AGREEMENT_STRATEGIES = "ddp,zero3,fsdp_full_shard,fsdp2_hsdp,mics"


class EmbeddedPredictionTest(unittest.TestCase):
    def test_the_default_matrix_step_is_predicted_within_15_percent(self):
        cores = physical_cores()
        load_before = os.getloadavg()[0]
        if cores != 2 or load_before > cores + 0.5:
            self.skipTest(f"load average {load_before:.1f} on {cores} physical cores: the "
                          f"bound is for the 2-core machine with no other job")
        tmp = Path(tempfile.mkdtemp(prefix="sbpred"))
        best = {}
        for i in range(5):
            out = tmp / f"m{i}.json"
            p = subprocess.run([SB, "run", "--model", "small", "--strategies",
                                AGREEMENT_STRATEGIES, "--np", "4", "--ranks-per-node", "2",
                                "--batch", "4", "--steps", "6", "--warmup", "2", "--quiet",
                                "--out", str(out)],
                               env=ENV, capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
            for r in json.loads(out.read_text())["results"]:
                ratio = r["residuals"]["ratio"]["step_time_s"]
                best[r["strategy"]] = min(best.get(r["strategy"], ratio), ratio)
            if all(abs(v - 1) < PREDICTION_AGREEMENT for v in best.values()):
                break
        self.assertEqual(sorted(best), sorted(AGREEMENT_STRATEGIES.split(",")))
        for name, ratio in best.items():
            with self.subTest(strategy=name):
                self.assertLess(abs(ratio - 1), PREDICTION_AGREEMENT,
                                f"{name}: measured / predicted {ratio:.3f}, all: {best}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
