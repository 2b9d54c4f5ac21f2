#!/usr/bin/env python3
"""Does glibc malloc's tuning change the default matrix's ranking? A benchmark, not a test.

Runs the default matrix (small, all strategies, 4 ranks as 2 virtual nodes x 2) R times with
glibc malloc as shipped and R times tuned (mmap threshold at glibc's 32 MiB cap, no trimming,
1 GiB top pad: the setting that hid the page-fault churn), the two interleaved round by round
so that a slow minute of a shared machine falls on both. For each strategy it prints the
median step time and page faults per step under each setting, and each ranking.

Two strategies within the machine's run-to-run noise can swap places between any two runs, so
a swap alone says nothing. A pair counts as *reordered by malloc* only when every shipped round
orders it one way, every tuned round the other way, and under each setting the medians differ
by more than the noise (the median over strategies and settings of one strategy's spread over
rounds: largest over smallest minus one); with 3 rounds, random order alone passes the first
two conditions for 1 pair in 32. The script prints those pairs (the issue's criterion: none),
Kendall's tau between the two median rankings, and each spread.

Usage: ci/malloc_ranking.py [--sb build/shardbench] [--repeats 3] [--json FILE]
"""
import argparse
import datetime
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile

BASE = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
            OPENBLAS_NUM_THREADS="1")
TUNED = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "4294967296",
         "MALLOC_TOP_PAD_": "1073741824"}
MATRIX = ["--model", "small", "--strategies", "all", "--np", "4", "--ranks-per-node", "2",
          "--batch", "4", "--warmup", "2", "--steps", "10", "--quiet"]


def commit():
    """The checkout's short commit (with -dirty when it has changes): what the figures are of."""
    out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                         text=True)
    return out.stdout.strip() or "unknown"


def one_run(sb, tuned, path):
    """{strategy: (median step s, median faults per step)} of one default-matrix run."""
    env = dict(BASE)
    for k in TUNED:
        env.pop(k, None)
    if tuned:
        env.update(TUNED)
    done = subprocess.run([sb, "run", *MATRIX, "--out", path], capture_output=True, text=True,
                          env=env)
    if done.returncode != 0:
        sys.exit(f"malloc_ranking: the matrix failed ({'tuned' if tuned else 'shipped'}):\n"
                 f"{done.stderr[-2000:]}")
    with open(path) as f:
        rows = json.load(f)["results"]
    out = {}
    for r in rows:
        if r["status"] != "ok":
            continue
        faults = r["memory"]["page_faults_per_step"]
        out[r["strategy"]] = (r["step_time_s"]["median"],
                              faults["minor"]["median"] + faults["major"]["median"])
    return out


def kendall_tau(a, b):
    """Kendall's tau-a between two orderings of the same names."""
    pos_a = {n: i for i, n in enumerate(a)}
    pos_b = {n: i for i, n in enumerate(b)}
    s = 0
    for x, y in itertools.combinations(a, 2):
        s += 1 if (pos_a[x] - pos_a[y]) * (pos_b[x] - pos_b[y]) > 0 else -1
    pairs = len(a) * (len(a) - 1) / 2
    return s / pairs if pairs else 1.0


def reordered_pairs(names, shipped_rounds, tuned_rounds, noise):
    """Pairs every shipped round orders one way and every tuned round the other, apart by more
    than the noise under both settings."""
    ms, mt = summarise(shipped_rounds)[0], summarise(tuned_rounds)[0]
    out = []
    for x, y in itertools.combinations(names, 2):
        ship = {r[x][0] < r[y][0] for r in shipped_rounds}
        tune = {r[x][0] < r[y][0] for r in tuned_rounds}
        apart = all(max(m[x], m[y]) / min(m[x], m[y]) - 1 > noise for m in (ms, mt))
        if len(ship) == 1 and len(tune) == 1 and ship != tune and apart:
            out.append((x, y))
    return out


def summarise(rounds):
    names = list(rounds[0])
    med = {n: statistics.median(r[n][0] for r in rounds) for n in names}
    faults = {n: statistics.median(r[n][1] for r in rounds) for n in names}
    spread = {n: max(r[n][0] for r in rounds) / min(r[n][0] for r in rounds) - 1 for n in names}
    return med, faults, spread


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sb", default="build/shardbench")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    shipped, tuned = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            shipped.append(one_run(args.sb, False, os.path.join(tmp, f"s{i}.json")))
            tuned.append(one_run(args.sb, True, os.path.join(tmp, f"t{i}.json")))
    names = [n for n in shipped[0] if all(n in r for r in shipped + tuned)]
    (ms, fs, ss), (mt, ft, st) = summarise(shipped), summarise(tuned)
    rank_s = sorted(names, key=ms.get)
    rank_t = sorted(names, key=mt.get)
    print(f"default matrix ({' '.join(MATRIX)}), {args.repeats} round(s) per setting, "
          f"interleaved; load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after; "
          f"{datetime.date.today()}, commit {commit()}")
    print(f"{'strategy':<24} {'shipped s':>9} {'rank':>4} {'faults':>6} {'spread':>6}  "
          f"{'tuned s':>9} {'rank':>4} {'faults':>6} {'spread':>6}")
    for n in names:
        print(f"{n:<24} {ms[n]:9.4f} {rank_s.index(n) + 1:4d} {fs[n]:6.0f} {ss[n]:6.1%}  "
              f"{mt[n]:9.4f} {rank_t.index(n) + 1:4d} {ft[n]:6.0f} {st[n]:6.1%}")
    noise = statistics.median([ss[n] for n in names] + [st[n] for n in names])
    print(f"noise (median spread over rounds): {noise:.1%}")
    flips = reordered_pairs(names, shipped, tuned, noise)
    tau = kendall_tau(rank_s, rank_t)
    print(f"Kendall's tau between the two median rankings: {tau:.2f}")
    print(f"pairs reordered by malloc (every round of one setting one way, every round of the "
          f"other the other way): {len(flips)}" +
          (": " + ", ".join(f"{x}/{y}" for x, y in flips) if flips else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shipped": shipped, "tuned": tuned, "kendall_tau": tau, "noise": noise,
                       "reordered_pairs": flips}, f, indent=1)


if __name__ == "__main__":
    main()
