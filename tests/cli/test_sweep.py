#!/usr/bin/python3
"""The property sweep: every subcommand x every strategy x a sampled grid of modes and knobs.

usage: test_sweep.py BUILD_DIR [--slice fast|full] [--seed N] [--jobs N] [--keep DIR]

Cases are drawn from the binary's strategy registry (its one-line refusal of an unknown name
lists them) and the knob/mode table tests/cli/sweep_options.py: `predict` (worlds 1..17, nodes
that do and do not divide them, bare counts, presets, odd and Llama shapes, --fit, --sweep),
`run` (tiny shapes, one step, up to 4 ranks, one multi-rank job at a time), `export`, `report`
and plots/compare.py on each strategy's results (a real run's, and altered copies). Every case
must end with exit 0 or 2 (export, run: 1 with their one "no strategy ... ok" line; compare: 1 is
a regression) and, when it refuses, with exactly one line on stderr and no output file; never
by a signal, a sanitizer report, a Python traceback or a timeout. Each prediction's JSON holds
its invariants: bytes >= 0, peak >= model state, fits == (device peak <= limit), step time finite > 0.

The seed (SB_SWEEP_SEED or --seed; random otherwise) picks the slice and is printed; a failure
prints the case's command and the seed, so `SB_SWEEP_SEED=N test_sweep.py BUILD --slice S`
replays the same cases. fast: a few hundred cases (ctest `sweep_fast`, in CI and under ASan);
full: the whole grid (ci/nightly_sanitize.sh, under ASan/UBSan).
"""
import argparse
import copy
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import sweep_options as table  # noqa: E402

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1", OMPI_MCA_mpi_yield_when_idle="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
FATAL = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "Traceback (most recent",
         "Segmentation fault", "core dumped", "terminate called")
FIXTURE = os.path.join(REPO, "tests", "fuzz", "corpus", "two_strategies.json")
COMPARE = os.path.join(REPO, "plots", "compare.py")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
# The README's own example (it once crashed in FSDP2's shards): always in every slice.
PINNED = [["predict", "--params", "7.5e9", "--world", "8"]]


def registered_strategies(sb):
    p = subprocess.run([sb, "predict", "--strategies", "no-such-strategy"], env=ENV,
                       capture_output=True, text=True, timeout=60)
    return p.stderr.strip().split("allowed: all or ")[1].split(",")


def draw_knobs(rng, sub, G, p):
    out = []
    for k in table.KNOBS:
        values = k["values"].get(sub)
        if not values or rng.random() >= p:
            continue
        v = rng.choice(values)
        if v is not None:
            out += [k["flag"]] + ([] if v == [] else [v.replace("{G}", str(G))])
    return out


def divides(shape, cluster_g=8):
    w, g = shape
    return w % (g or min(w, cluster_g)) == 0


def pick_shape(rng, shapes):
    """Mostly nodes that divide the world (a prediction), sometimes not (a refusal)."""
    fit = [s for s in shapes if divides(s)]
    return rng.choice(fit if fit and rng.random() < 0.85 else shapes)


def predict_case(rng, strategy, mode=None, world=None, p=0.2, extra=()):
    w, g = pick_shape(rng, [s for s in table.SHAPES["predict"] if world is None or s[0] == world])
    args = ["predict", *(mode or rng.choice(table.MODES["predict"])), "--strategies", strategy,
            "--world", str(w)] + (["--ranks-per-node", str(g)] if g else [])
    return args + draw_knobs(rng, "predict", g or min(w, 8), p) + list(extra)


def run_case(rng, strategy, p=0.15):
    np_, g = pick_shape(rng, table.SHAPES["run"])
    args = ["run", *rng.choice(table.MODES["run"]), "--strategies", strategy, "--np", str(np_),
            "--steps", "1", "--warmup", str(rng.choice([0, 1])), "--batch", "1", "--quiet",
            "--peak-gflops", "1", "--timeout-s", "120"]
    args += ["--ranks-per-node", str(g)] if g else []
    return args + draw_knobs(rng, "run", g or np_, p)


def cases(rng, names, slice_):
    """The predict and run cases of a slice, every strategy in each."""
    pred, runs = [list(c) for c in PINNED], []
    if slice_ == "fast":
        for i in range(25 * len(names)):
            extra = rng.choice([(), (), (), (), ("--fit", "--max-world", "64"), ("--sweep", "20")])
            pred.append(predict_case(rng, names[i % len(names)], extra=extra))
        runs = [run_case(rng, "all", 0.1), run_case(rng, rng.choice(names))]
        return pred, runs
    for s in names:
        for mode in table.MODES["predict"]:
            for w in range(1, 18):  # every world 1..17, a node shape and knobs drawn for each
                pred.append(predict_case(rng, s, mode, w, 0.25))
            pred.append(predict_case(rng, s, mode, extra=("--fit", "--max-world", "256")))
            pred.append(predict_case(rng, s, mode, extra=("--sweep", "50")))
        for k in table.KNOBS:  # every value of every knob, alone
            for v in k["values"].get("predict", []):
                if v is not None:
                    pred.append(predict_case(rng, s, p=0) + [k["flag"]] +
                                ([] if v == [] else [v.replace("{G}", "8")]))
        runs += [run_case(rng, s) for _ in range(3)]
    runs += [run_case(rng, "all", 0.1) for _ in range(4)]
    return pred, runs


def finite_nonneg(x, where, errs):
    if isinstance(x, dict):
        for k, v in x.items():
            finite_nonneg(v, f"{where}.{k}", errs)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            finite_nonneg(v, f"{where}[{i}]", errs)
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        if not (math.isfinite(x) and x >= 0):
            errs.append(f"{where} = {x}")


def prediction_invariants(doc):
    errs = []
    for r in doc.get("results", []):
        s = r.get("strategy")
        if "memory" not in r:  # --fit past --max-world: no prediction to hold
            continue
        m, st = r["memory"], r["step_time_s"]
        finite_nonneg(r["comm"], f"{s}.comm", errs)
        finite_nonneg(m, f"{s}.memory", errs)
        state = sum(m["model_state_bytes_per_rank"].values())
        if m["peak_bytes_per_rank"] < state:
            errs.append(f"{s}: peak {m['peak_bytes_per_rank']} < model state {state}")
        # On a GPU cluster the fit is of the device's peak: the tensors' peak plus the CUDA
        # context, NCCL's buffers and the caching allocator's margin (memory.runtime).
        device = m.get("device_peak_bytes_per_rank", m["peak_bytes_per_rank"])
        if device < m["peak_bytes_per_rank"]:
            errs.append(f"{s}: device peak {device} < tensor peak {m['peak_bytes_per_rank']}")
        if r["fits"] != (device <= m["limit_bytes_per_rank"]):
            errs.append(f"{s}: fits {r['fits']} with device peak {device} "
                        f"and limit {m['limit_bytes_per_rank']}")
        t = st["predicted"]
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0):
            errs.append(f"{s}: step time {t}")
        if "fit" in r and r["fit"].get("min_world") is not None and not r["fits"]:
            errs.append(f"{s}: --fit min_world {r['fit']['min_world']} does not fit")
    return errs


def execute(argv, out, timeout, allow_one=None):
    """Runs one case; returns the problems with it (empty: it held)."""
    try:
        p = subprocess.run(argv, env=ENV, capture_output=True, text=True, errors="replace",
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return [f"timeout after {timeout} s"], None
    errs, lines = [], [ln for ln in p.stderr.splitlines() if ln.strip()]
    text = p.stdout + p.stderr
    if any(f in text for f in FATAL) or p.returncode < 0 or p.returncode > 2:
        errs.append(f"exit {p.returncode}" + (f" (signal {-p.returncode})" if p.returncode < 0
                                              else ""))
    elif p.returncode == 1 and not (allow_one and allow_one in p.stderr):
        errs.append("exit 1 without its documented reason")
    elif p.returncode == 2 and len(lines) != 1:
        errs.append(f"refusal in {len(lines)} lines, not one")
    elif p.returncode == 2 and out and os.path.exists(out):
        errs.append(f"refused, yet wrote {out}")
    if errs:
        errs.append("output: " + "\n    ".join(text.strip().splitlines()[-8:]))
    return errs, p.returncode


def check_predict(sb, args, tmp, i, timeout):
    out = os.path.join(tmp, f"p{i}.json")
    errs, rc = execute([sb, *args, "--json", out], out, timeout)
    if not errs and rc == 0 and "--sweep" not in args:
        with open(out) as f:
            errs = prediction_invariants(json.load(f))
    return errs, rc


def check_run(sb, args, tmp, i, timeout):
    out = os.path.join(tmp, f"r{i}.json")
    errs, rc = execute([sb, *args, "--out", out], out, timeout, "no strategy succeeded")
    if not errs and os.path.exists(out):
        with open(out) as f:
            doc = json.load(f)
        errs = [f"{r.get('strategy')}: status error: {r.get('error')}"
                for r in doc["results"] if r.get("status") == "error"]
    return errs, rc


def altered(doc, how):
    """A results document as a tool may meet it: as written, or damaged in one way."""
    d = copy.deepcopy(doc)
    if how == "oom":
        for r in d["results"]:
            r["status"] = "oom"
    elif how == "no-steps":
        for r in d["results"]:
            r["step_time_s"] = []
    elif how == "no-config":
        d.pop("config", None)
    elif how == "empty":
        d["results"] = []
    return d


def tool_inputs(rng, names, run_docs, tmp):
    """(strategy, alteration, path): each strategy's results as written, and one alteration."""
    with open(FIXTURE) as f:
        fixture = json.load(f)
    base = {}
    for s in names:
        d = copy.deepcopy(fixture)
        d["results"] = [dict(d["results"][0], strategy=s)]
        base[s] = d
    for d in run_docs:  # a real run's results, strategy by strategy
        for r in d["results"]:
            if r.get("strategy") in base:
                base[r["strategy"]] = dict(d, results=[r])
    inputs = []
    for s, d in base.items():
        for how in ["as-written", rng.choice(["oom", "no-steps", "no-config", "empty"])]:
            path = os.path.join(tmp, f"in-{s}-{how}.json")
            with open(path, "w") as f:
                json.dump(altered(d, how), f)
            inputs.append((s, how, path))
    truncated = os.path.join(tmp, "in-truncated.json")
    with open(inputs[0][2]) as f, open(truncated, "w") as g:
        g.write(f.read()[:200])
    return inputs + [("-", "truncated", truncated)]


def tool_cases(sb, rng, inputs, tmp, slice_):
    """(argv, output path, the exit-1 reason allowed, must exit 0)"""
    out = []
    reports = inputs if slice_ == "full" else rng.sample(inputs, 2)
    for i, (s, how, path) in enumerate(inputs):
        fmt = rng.choice([["bencher"], ["gbench"], ["github-action-benchmark", "--tool", "bigger"],
                          ["github-action-benchmark", "--tool", "smaller"]])
        e = os.path.join(tmp, f"e{i}.json")
        out.append(([sb, "export", "--format", *fmt, path, "--out", e], e,
                    "no strategy with status ok", False))
        out.append(([PY, COMPARE, path, path], None, "REGRESSION", how == "as-written"))
    for i, (s, how, path) in enumerate(reports):
        h = os.path.join(tmp, f"h{i}.html")
        out.append(([sb, "report", path, "--out", h], h, None, False))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--slice", choices=["fast", "full"], default="fast")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", help="keep the cases' files in this folder")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int(os.environ.get("SB_SWEEP_SEED", "0") or 0)
    seed = seed or random.SystemRandom().randrange(1, 2**31)
    sb = os.path.join(os.path.abspath(a.build), "shardbench")
    asan = "asan" in os.path.basename(os.path.abspath(a.build))
    scale = 5 if asan else 1  # the sanitized binary is several times slower
    rng = random.Random(seed)
    names = registered_strategies(sb)
    pred, runs = cases(rng, names, a.slice)
    tmp = a.keep or tempfile.mkdtemp(prefix="sbsweep.")
    os.makedirs(tmp, exist_ok=True)
    print(f"sweep: seed {seed}, slice {a.slice}, {len(names)} strategies, {len(pred)} predict "
          f"+ {len(runs)} run cases (replay: SB_SWEEP_SEED={seed} {sys.argv[0]} {a.build} "
          f"--slice {a.slice})", flush=True)
    t0, failures, exits = time.time(), [], {}

    def record(kind, argv, result):
        errs, rc = result
        exits.setdefault(kind, {}).setdefault(rc, 0)
        exits[kind][rc] += 1
        if errs:
            failures.append((kind, argv, errs))
            print(f"FAIL {kind}: {' '.join(argv)}\n  " + "\n  ".join(errs), flush=True)

    with ThreadPoolExecutor(a.jobs) as pool:
        for args, errs in zip(pred, pool.map(
                lambda ia: check_predict(sb, ia[1], tmp, ia[0], 60 * scale), enumerate(pred))):
            record("predict", args, errs)
    for i, args in enumerate(runs):  # one multi-rank job at a time
        record("run", args, check_run(sb, args, tmp, i, 300 * scale))
    run_docs = []
    for i in range(len(runs)):
        path = os.path.join(tmp, f"r{i}.json")
        if os.path.exists(path):
            with open(path) as f:
                run_docs.append(json.load(f))
    tools = tool_cases(sb, rng, tool_inputs(rng, names, run_docs, tmp), tmp, a.slice)

    def check_tool(c):
        argv, out, one, must_pass = c
        errs, rc = execute(argv, out, 120 * scale, one)
        return errs + ([f"exit {rc} on a file compared with itself"] if must_pass and rc else []), rc

    with ThreadPoolExecutor(a.jobs) as pool:
        for c, errs in zip(tools, pool.map(check_tool, tools)):
            record("compare" if c[0][0] == PY else c[0][1], c[0], errs)
    n = len(pred) + len(runs) + len(tools)
    print(f"sweep: {n} cases ({len(pred)} predict, {len(runs)} run, {len(tools)} export/compare/"
          f"report) in {time.time() - t0:.1f} s, {len(failures)} failed; seed {seed}")
    print("exit codes: " + "; ".join(f"{k} " + ", ".join(f"{rc}: {n}" for rc, n in
                                                          sorted(v.items(), key=str))
                                     for k, v in exits.items()))
    if not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
