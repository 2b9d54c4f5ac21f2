#!/usr/bin/env python3
"""Does a strategy's step time depend on the strategies run before it? A benchmark, not a test.

For each world it runs every strategy three ways with the same settings: inside the full list
in registry order, inside the list reversed, and alone (one `shardbench run` per strategy).
It prints each strategy's median step time in the three, the worst alone-vs-list difference,
and at world 1 each strategy against ddp (same compute, no communication). The criteria it
reports (issue: within 10 %) are only meaningful on a quiet machine; the load average before
and after is printed with the table. Writes the rows as JSON with --json.

With --repeats R the three ways are run R times, interleaved round by round (list, reversed,
each alone; then again), and each figure is the median over the rounds. On a shared virtual
machine one configuration's median moves by about +-8 % from process to process and from
minute to minute; interleaving spreads that drift over the three ways instead of charging it
to whichever ran during a slow minute. The spread over rounds is printed beside each figure.

Usage: ci/isolation.py [--sb build/shardbench] [--worlds 1,2,4] [--model small] [--steps 8]
                       [--repeats 3]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1")


def commit():
    """The checkout's short commit (with -dirty when it has changes): what the figures are of."""
    out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                         text=True)
    return out.stdout.strip() or "unknown"


def registry(sb):
    """The binary's strategy names, from its one-line refusal of an unknown one."""
    out = subprocess.run([sb, "predict", "--strategies", "?"], capture_output=True, text=True,
                         env=ENV)
    names = out.stderr.rsplit("all or ", 1)[-1].split()[0].split(",") if "all or " in \
        out.stderr else []
    if not names:
        sys.exit(f"isolation: no strategy list in {sb}'s refusal: {out.stderr.strip()}")
    return names


def medians(sb, world, strategies, args, tmp):
    path = os.path.join(tmp, f"w{world}-{strategies[0]}-{len(strategies)}.json")
    cmd = [sb, "run", "--np", str(world), "--ranks-per-node", str(min(world, 2)),
           "--model", args.model, "--batch", str(args.batch), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--strategies", ",".join(strategies), "--out", path]
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if done.returncode != 0:
        sys.exit(f"isolation: {' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    with open(path) as f:
        rows = json.load(f)["results"]
    return {r["strategy"]: r["step_time_s"]["median"] for r in rows if r["status"] == "ok"}


def one_round(sb, world, names, args, tmp):
    """One pass of the three ways: {strategy: (alone, in list, in reversed list)}."""
    forward = medians(sb, world, names, args, tmp)
    backward = medians(sb, world, names[::-1], args, tmp)
    return {n: (medians(sb, world, [n], args, tmp)[n], forward[n], backward[n]) for n in names}


def spread(values):
    """Largest over smallest minus one: how far the rounds disagree."""
    return max(values) / min(values) - 1


def world_rows(sb, world, names, args, tmp):
    rounds = [one_round(sb, world, names, args, tmp) for _ in range(args.repeats)]
    rows = []
    for name in names:
        alone, forward, backward = ([r[name][way] for r in rounds] for way in range(3))
        row = {"world": world, "strategy": name, "alone_s": statistics.median(alone),
               "in_list_s": statistics.median(forward),
               "in_reversed_list_s": statistics.median(backward),
               "rounds": {"alone_s": alone, "in_list_s": forward, "in_reversed_list_s": backward},
               "spread_over_rounds": max(spread(alone), spread(forward), spread(backward))}
        row["worst_vs_alone"] = max(abs(row["in_list_s"] / row["alone_s"] - 1),
                                    abs(row["in_reversed_list_s"] / row["alone_s"] - 1))
        rows.append(row)
    if world == 1:
        ddp = next(r["alone_s"] for r in rows if r["strategy"] == "ddp")
        for r in rows:
            r["alone_vs_ddp"] = r["alone_s"] / ddp - 1
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sb", default="build/shardbench")
    ap.add_argument("--worlds", default="1,2,4")
    ap.add_argument("--model", default="small")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds of the three ways, interleaved; figures are medians")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    names = registry(args.sb)
    load0 = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for world in (int(w) for w in args.worlds.split(",")):
            rows += world_rows(args.sb, world, names, args, tmp)
    load1 = os.getloadavg()[0]
    print(f"model {args.model}, batch {args.batch}, {args.steps} steps after {args.warmup} "
          f"warm-up; {args.repeats} round(s); load average {load0:.2f} before, {load1:.2f} after; "
          f"{datetime.date.today()}, commit {commit()}")
    print(f"{'world':>5} {'strategy':<24} {'alone s':>8} {'list s':>8} {'reversed':>8} "
          f"{'worst':>7} {'vs ddp':>7} {'rounds':>7}")
    for r in rows:
        vs = f"{r['alone_vs_ddp']:+.1%}" if "alone_vs_ddp" in r else ""
        print(f"{r['world']:>5} {r['strategy']:<24} {r['alone_s']:8.4f} {r['in_list_s']:8.4f} "
              f"{r['in_reversed_list_s']:8.4f} {r['worst_vs_alone']:7.1%} {vs:>7} "
              f"{r['spread_over_rounds']:7.1%}")
    worst = max(r["worst_vs_alone"] for r in rows)
    print(f"worst alone-vs-list difference: {worst:.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load_before": load0, "load_after": load1, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
