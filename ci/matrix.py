#!/usr/bin/python3
# Runs a matrix file (TOML, read with Python's tomllib): one MPI job (`shardbench run --np`)
# per cell, one results file per cell named by a stable id, an index.json, resume, a summary
# table, and optionally each cell compared with its baseline by plots/compare.py. Does not
# measure anything itself and does not judge numbers (compare.py does).
"""Run a shardbench matrix file: one MPI job per cell.

usage: ci/matrix.py MATRIX.toml [--out DIR] [--baseline-dir DIR] [--cell ID ...] [--list]
                    [--check] [--shardbench PATH] [--fresh] [-- EXTRA run FLAGS]

The matrix file (see ci/matrix/nightly.toml):

  [run]                  flags every cell gets (any `shardbench run` flag, without the --)
  steps = 10
  strategies = "all"
  [axes]                 each key is a list; the cells are their cartesian product
  model = ["tiny", "small"]
  precision = ["fp32"]
  world = [{np = 2, ranks-per-node = 1}, {np = 4, ranks-per-node = 2}]   # a table: flags
  bucket-mb = [10, 25]                                                  # that go together
  [[exclude]]            a cell matching every key of one of these is left out
  model = "small"
  np = 2

A value true is a bare flag (forward-prefetch = true), false leaves the flag out. `np` is
required (from [run] or an axis): every cell is its own `--np` job.

Cell id: "<model>-np<N>-<precision>-<hash>", hash = the first 10 hex digits of SHA-256 of the
cell's flags as canonical JSON (sorted keys, values as strings), so the same configuration
gets the same id in any matrix file and any order. Files: DIR/<id>.json per cell and
DIR/index.json (kind "matrix-index": each cell's id, flags, file, status, exit code, wall
time and comparison verdict; `shardbench export` reads it); DIR/compare/<id>.json holds each
comparison's rows (compare.py --json).

Resume: a cell whose file already has every requested strategy ok is kept as it is; any other
existing file is resumed (`shardbench run --resume` keeps its ok strategies). --fresh reruns.
Flags after `--` go to every cell's run but are not part of the id: use another --out (or
--fresh) when changing them.

Confirmation: a cell whose comparison regresses is run once more (a fresh file,
DIR/confirm/<id>.json, compared as DIR/confirm/<id>.compare.json) and the regression stands
only if that run regresses in the same (strategy, metric) too: timing on a shared machine moves between runs by more than one
run's samples show (whole runs of 4 ranks on 2 cores here differ by up to 50 %), while bytes and
memory regress again every time. --no-confirm reports the first comparison as it is.

Check (--check): every cell's workload, topology and strategy flags go through `shardbench
predict`, which binds them with run's own options table and refuses what run would refuse (a
knob on a precision it cannot serve, a value out of range), in a second per cell instead of
minutes into a sweep; flags only run takes (--hosts, the link, --steps) are left to run.

Exit status: 0 every cell ran and nothing regressed; 1 a regression against a baseline;
2 bad input, a cell that failed (its others still run), or a comparison that failed.
"""
import argparse
import datetime
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plots"))
from compare import STRATEGY_ORDER as ALL_STRATEGIES  # noqa: E402  (what `--strategies all` runs)
# Flags the runner owns: a matrix file may not set them.
RESERVED = {"out", "resume", "quiet"}


class MatrixError(Exception):
    """A matrix file that cannot be run; str() is one line naming the file and the key."""


def flag_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def load_matrix(path):
    """The cells of a matrix file: a list of {flag: value-as-string}, in file order."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise MatrixError(f"{path}: {e}") from None
    unknown = set(doc) - {"run", "axes", "exclude"}
    if unknown:
        raise MatrixError(f"{path}: unknown section(s) {sorted(unknown)}; allowed: run, axes, "
                          "exclude")
    base, axes = doc.get("run", {}), doc.get("axes", {})
    for key, values in axes.items():
        if not isinstance(values, list) or not values:
            raise MatrixError(f"{path}: axes.{key} must be a non-empty list")
    cells = []
    for combo in itertools.product(*[[(k, v) for v in vs] for k, vs in axes.items()]):
        flags = dict(base)
        for key, value in combo:
            flags.update(value if isinstance(value, dict) else {key: value})
        flags = {k: flag_text(v) for k, v in flags.items()}
        bad = RESERVED & set(flags)
        if bad:
            raise MatrixError(f"{path}: {sorted(bad)} are set by the runner, not the matrix")
        if "np" not in flags:
            raise MatrixError(f"{path}: no np: set it in [run] or as an axis")
        if any(all(flags.get(k) == flag_text(v) for k, v in ex.items())
               for ex in doc.get("exclude", [])):
            continue
        if flags not in cells:
            cells.append(flags)
    if not cells:
        raise MatrixError(f"{path}: the matrix has no cells")
    return cells


def cell_id(flags):
    canonical = json.dumps(flags, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:10]
    return (f"{flags.get('model', 'small')}-np{flags['np']}-{flags.get('precision', 'fp32')}-"
            f"{digest}").replace(",", "_").replace("/", "_")


def run_args(flags):
    args = []
    for key, value in flags.items():
        if value == "true":
            args.append(f"--{key}")
        elif value != "false":
            args += [f"--{key}", value]
    return args


# run's flags that predict spells differently.
RUN_TO_PREDICT = {"np": "world"}


def help_defaults(sb, command):
    """{flag: default or None} of the long flags `shardbench COMMAND --help` lists."""
    text = subprocess.run([str(sb), command, "--help"], capture_output=True, text=True,
                          timeout=60).stdout
    found = re.finditer(r"^\s+(?:-\w,)?--([\w-]+)(?: [A-Z]+(?:=(\S+))?)?", text, re.M)
    return {m[1]: m[2] for m in found}


def check_cells(sb, cells):
    """Each cell's flags through `shardbench predict`: [(id, refusal line)] for those refused.
    A flag the cell leaves to run's default is given that default (run trains fp32 by default,
    predict bf16-mixed)."""
    run_defaults, predict_defaults = help_defaults(sb, "run"), help_defaults(sb, "predict")
    if not run_defaults or not predict_defaults:
        raise MatrixError(f"{sb}: `run --help` / `predict --help` printed no flags")
    refused = []
    for cid, flags in cells:
        named = {RUN_TO_PREDICT.get(k, k): v for k, v in flags.items()}
        pflags = {k: v for k, v in named.items() if k in predict_defaults}
        for key, default in run_defaults.items():
            if (key in predict_defaults and key not in named and default is not None
                    and default != predict_defaults[key]):
                pflags[key] = default
        p = subprocess.run([str(sb), "predict", *run_args(pflags), "--cluster", "cpu-local"],
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            lines = (p.stderr or p.stdout).strip().splitlines()
            refused.append((cid, lines[-1] if lines else f"exit {p.returncode}"))
    return refused


def requested(flags):
    s = flags.get("strategies", "all")
    return ALL_STRATEGIES if s == "all" else s.split(",")


def file_statuses(path):
    try:
        with open(path) as f:
            doc = json.load(f)
        return {r["strategy"]: r.get("status") for r in doc.get("results", [])}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def run_cell(sb, flags, out, extra, fresh):
    """Runs one cell (or keeps/resumes its file). Returns (state, exit code, wall s)."""
    statuses = file_statuses(out) if out.exists() and not fresh else None
    if statuses and all(statuses.get(s) == "ok" for s in requested(flags)):
        return "kept", 0, 0.0
    cmd = [str(sb), "run", *run_args(flags), *extra, "--out", str(out), "--quiet"]
    if statuses is not None:
        cmd.append("--resume")
    elif out.exists():
        out.rename(out.with_suffix(".json.stale"))  # unreadable or --fresh: keep it aside
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    rc = subprocess.call(cmd)
    if rc == 2 and statuses is not None:  # written by another configuration: start over
        out.rename(out.with_suffix(".json.stale"))
        rc = subprocess.call(cmd[:-1])
    return ("ran" if rc == 0 else "failed"), rc, time.monotonic() - t0


def compare_cell(baseline, out, report, threshold_pct):
    """plots/compare.py baseline vs this cell; returns (verdict, exit code)."""
    if not baseline.exists():
        return "no baseline", 0
    print(f"$ compare.py {baseline} {out}", flush=True)
    report.parent.mkdir(exist_ok=True)
    rc = subprocess.call(["/usr/bin/python3", str(ROOT / "plots" / "compare.py"), str(baseline),
                          str(out), "--json", str(report), "--threshold-pct", str(threshold_pct)])
    return {0: "ok", 1: "REGRESSION"}.get(rc, "comparison failed"), rc


def confirm_cell(sb, flags, out_dir, cid, extra, baseline, threshold_pct):
    """Runs a regressed cell once more and compares that run; returns (verdict, exit code)."""
    out = out_dir / "confirm" / f"{cid}.json"
    out.parent.mkdir(exist_ok=True)
    print(f"=== matrix {cid}: regression; confirming with a second run", flush=True)
    _, rc, _ = run_cell(sb, flags, out, extra, True)
    if rc != 0:
        return "confirmation run failed", 2
    return compare_cell(baseline, out, out_dir / "confirm" / f"{cid}.compare.json",
                        threshold_pct)


def regressed_rows(report):
    """(strategy, metric) of every row compare.py --json marked REGRESSED in `report`."""
    try:
        rows = json.loads(Path(report).read_text())["rows"]
    except (OSError, ValueError, KeyError):
        return set()
    return {(r["strategy"], r["metric"]) for r in rows if r.get("verdict") == "REGRESSED"}


def report_notes(report):
    """compare.py --json's notes (a changed MFU denominator, ...) in `report`."""
    try:
        return json.loads(Path(report).read_text()).get("notes") or []
    except (OSError, ValueError):
        return []


def judge_cell(args, cid, flags, out, extra):
    """The cell's comparison with its baseline; a regression is confirmed by a second run:
    it stands for the (strategy, metric) pairs that regress in both runs."""
    baseline = Path(args.baseline_dir) / out.name
    report = out.parent / "compare" / out.name
    verdict, crc = compare_cell(baseline, out, report, args.threshold_pct)
    judged = {"baseline": str(baseline), "verdict": verdict, "exit_code": crc}
    notes = report_notes(report)
    if notes:  # e.g. MFU's denominator redefined: said once per cell, never a regression
        judged["notes"] = notes
    if crc != 1 or args.no_confirm:
        return judged
    cverdict, ccrc = confirm_cell(Path(args.shardbench), flags, out.parent, cid, extra, baseline,
                                  args.threshold_pct)
    both = sorted(regressed_rows(report) &
                  regressed_rows(out.parent / "confirm" / f"{cid}.compare.json"))
    judged["confirmation"] = {"file": f"confirm/{cid}.json", "verdict": cverdict,
                              "exit_code": ccrc, "regressed_in_both": [list(p) for p in both]}
    if ccrc not in (0, 1):
        judged.update(verdict=cverdict, exit_code=ccrc)
    elif not both:  # not reproduced: the first run's timing was the machine's
        judged.update(verdict="ok", exit_code=0)
    return judged


def write_index(path, matrix_file, entries):
    doc = {"suite": "shardbench", "kind": "matrix-index", "schema_version": 1,
           "matrix_file": str(matrix_file),
           "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime(
               "%Y-%m-%dT%H:%M:%SZ"),
           "cells": entries}
    tmp = path.with_suffix(f".json.tmp.{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.rename(path)


def summary(entries, out_dir):
    """Per cell: state, strategies ok, verdict; then tokens/s per strategy and cell."""
    print(f"\n{'cell':<34} {'state':<7} {'ok':>5} {'wall s':>7}  comparison")
    for e in entries:
        ok = sum(v == "ok" for v in e["strategies"].values())
        print(f"{e['id']:<34} {e['state']:<7} {ok:>2}/{len(requested(e['flags'])):<2} "
              f"{e['wall_s']:>7.1f}  {e.get('comparison', {}).get('verdict', '-')}")
    notes = list(dict.fromkeys(n for e in entries for n in e.get("comparison", {}).get("notes", [])))
    for n in notes:  # the same note for every cell is said once
        print(f"note: {n}")
    cols = [e["id"].rsplit("-", 1)[0] for e in entries]
    print(f"\ntokens/s {'':<18} " + " ".join(f"{c:>18}" for c in cols))
    rates = {}
    for e in entries:
        try:
            doc = json.loads((out_dir / e["file"]).read_text())
        except (OSError, ValueError):
            continue
        for r in doc.get("results", []):
            tp = (r.get("throughput") or {}).get("tokens_per_s")
            rates[(e["id"], r.get("strategy"))] = f"{tp:.0f}" if tp else r.get("status", "-")
    for s in ALL_STRATEGIES:
        if any((e["id"], s) in rates for e in entries):
            print(f"{s:<27} " + " ".join(f"{rates.get((e['id'], s), '-'):>18}" for e in entries))


def check_main(args, cells):
    try:
        refused = check_cells(Path(args.shardbench), cells)
    except (MatrixError, OSError, subprocess.SubprocessError) as e:
        print(f"matrix: {e}", file=sys.stderr)
        return 2
    for cid, line in refused:
        print(f"matrix: {args.matrix}: cell {cid} refused: {line}", file=sys.stderr)
    print(f"{len(cells) - len(refused)} of {len(cells)} cell(s) accepted by shardbench predict")
    return 2 if refused else 0


def main(argv):
    extra = []
    if "--" in argv:
        extra, argv = argv[argv.index("--") + 1:], argv[:argv.index("--")]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("matrix", metavar="MATRIX.toml")
    ap.add_argument("--out", default="results/runs/matrix", help="directory of the cell files")
    ap.add_argument("--baseline-dir", help="compare each cell with DIR/<id>.json")
    ap.add_argument("--threshold-pct", type=float, default=10.0,
                    help="compare.py's smallest step-time change that counts (default 10)")
    ap.add_argument("--cell", action="append", help="run only this cell id (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the cells as JSON and exit")
    ap.add_argument("--check", action="store_true",
                    help="check every cell's flags with `shardbench predict`, run nothing")
    ap.add_argument("--shardbench", default=str(ROOT / "build" / "shardbench"))
    ap.add_argument("--fresh", action="store_true", help="rerun cells that have a file")
    ap.add_argument("--no-confirm", action="store_true",
                    help="do not rerun a regressed cell to confirm the regression")
    args = ap.parse_args(argv)
    try:
        cells = [(cell_id(f), f) for f in load_matrix(args.matrix)]
    except MatrixError as e:
        print(f"matrix: {e}", file=sys.stderr)
        return 2
    if args.cell:
        unknown = set(args.cell) - {cid for cid, _ in cells}
        if unknown:
            print(f"matrix: --cell {sorted(unknown)[0]}: not a cell of {args.matrix} "
                  "(--list shows them)", file=sys.stderr)
            return 2
        cells = [(cid, f) for cid, f in cells if cid in args.cell]
    if args.list:
        print(json.dumps([{"id": cid, "flags": f} for cid, f in cells], indent=1))
        return 0
    if args.check:
        return check_main(args, cells)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    entries, failed, regressed = [], False, False
    for i, (cid, flags) in enumerate(cells):
        print(f"\n=== matrix [{i + 1}/{len(cells)}] {cid}: {' '.join(run_args(flags))}",
              flush=True)
        out = out_dir / f"{cid}.json"
        state, rc, wall = run_cell(Path(args.shardbench), flags, out, extra, args.fresh)
        entry = {"id": cid, "flags": flags, "file": out.name, "state": state, "exit_code": rc,
                 "wall_s": round(wall, 2), "strategies": file_statuses(out) or {}}
        failed |= rc != 0
        if args.baseline_dir and out.exists():
            entry["comparison"] = judge_cell(args, cid, flags, out, extra)
            crc = entry["comparison"]["exit_code"]
            regressed |= crc == 1
            failed |= crc not in (0, 1)
        entries.append(entry)
        write_index(out_dir / "index.json", args.matrix, entries)
    summary(entries, out_dir)
    print(f"\nindex: {out_dir / 'index.json'}")
    return 2 if failed else 1 if regressed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
