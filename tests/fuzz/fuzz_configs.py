#!/usr/bin/python3
"""Mutation fuzzer of the JSON files shardbench reads, through the command as a user runs it.

usage: fuzz_configs.py BUILD_DIR [--runs N] [--seed S]

Targets (the parser each exercises): --ds-config (ds_config.cc, through run and predict),
--fsdp-config (fsdp_config.cc), --ddp-config (ddp_config.cc), --cluster FILE (cluster.cc) and
a results file (results_reader.cc, through export). Each starts from its seed corpus (the
committed files of tests/cli, the presets' clusters, tests/fuzz/corpus) — run as they are,
then N mutants per target: a key deleted, renamed or added, a value swapped for another type,
an extreme or non-finite number, a deep nest, the text truncated or a byte changed. Every input
must end as the sweep's cases do (tests/cli/test_sweep.py: exit 0 or 2 with one line, export's
documented 1; never a signal, a sanitizer report or a timeout). `run` is stopped by --out being
a folder, which it checks after every config file: the parsers run, no MPI job starts.
The seed (SB_FUZZ_SEED or --seed; random otherwise) is printed: a failure replays with it.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CLI = os.path.join(REPO, "tests", "cli")
sys.path.insert(0, CLI)
import test_sweep  # noqa: E402  (the one rule every case is held to)

ODD = [None, True, False, -1, 0, 1, 1.5, -1e308, 1e308, 2**63, 2**64, -2**63 - 1, "", "x" * 4096,
       "on", "bf16", [], {}, [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]


def files(folder, contains=""):
    return sorted(os.path.join(folder, f) for f in os.listdir(folder)
                  if f.endswith(".json") and contains in f)


def targets(sb, tmp):
    """name -> (seed texts, argv for a file)"""
    clusters = []
    for name in ["dgx-h100", "cpu-local", "h200", "dgx-a100-80g"]:
        p = subprocess.run([sb, "predict", "--cluster", name, "--show-cluster"],
                           capture_output=True, text=True, env=test_sweep.ENV, timeout=60)
        clusters.append(p.stdout)
    read = lambda paths: [open(p).read() for p in paths]  # noqa: E731
    run = [sb, "run", "--model", "tiny", "--np", "2", "--out", tmp]
    return {
        "ds-config/run": (read(files(os.path.join(CLI, "ds_configs"))), run + ["--ds-config"]),
        "ds-config/predict": (read(files(os.path.join(CLI, "ds_configs"))),
                              [sb, "predict", "--model", "tiny", "--world", "2", "--ds-config"]),
        "fsdp-config": (read(files(os.path.join(CLI, "fsdp_configs"))), run + ["--fsdp-config"]),
        "ddp-config": (read(files(CLI, "ddp_config")) + ['{"bucket_cap_mb": 1}'],
                       run + ["--ddp-config"]),
        "cluster": (clusters + read(files(os.path.join(REPO, "bench", "clusters"))),
                    [sb, "predict", "--model", "tiny", "--world", "2", "--cluster"]),
        "results": (read(files(os.path.join(HERE, "corpus"))),
                    [sb, "export", "--format", "bencher", "--out", os.path.join(tmp, "e.json")]),
    }


def paths_of(x, at=()):
    yield at
    if isinstance(x, dict):
        for k, v in x.items():
            yield from paths_of(v, at + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from paths_of(v, at + (i,))


def mutate(rng, text):
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if doc is None or rng.random() < 0.25:  # the text itself
        b = bytearray(text.encode())
        how = rng.randrange(4)
        if how == 0 or not b:
            return text[:rng.randrange(len(text) + 1)]
        if how == 1:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif how == 2:
            b[rng.randrange(len(b)):0] = rng.choice([b"NaN", b"Infinity", b"-0", b"1e999", b"\0"])
        else:
            return text.replace(":", ": 1e400,\"dup\":", 1)
        return b.decode("utf-8", "replace")
    path = rng.choice(list(paths_of(doc)))
    if not path:
        return json.dumps(rng.choice(ODD))
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    how, key = rng.randrange(3), path[-1]
    if how == 0 and isinstance(parent, dict):
        del parent[key]
    elif how == 1 and isinstance(parent, dict):
        parent[rng.choice(["bogus", key + "_", key.upper()])] = parent.pop(key)
    else:
        parent[key] = rng.choice(ODD)
    return json.dumps(doc, allow_nan=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--runs", type=int, default=200, help="mutants per target")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    seed = a.seed or int(os.environ.get("SB_FUZZ_SEED", "0") or 0) or \
        random.SystemRandom().randrange(1, 2**31)
    rng = random.Random(seed)
    sb = os.path.join(os.path.abspath(a.build), "shardbench")
    tmp = tempfile.mkdtemp(prefix="sbfuzzcfg.")
    scale = 5 if "asan" in os.path.basename(os.path.abspath(a.build)) else 1
    print(f"fuzz_configs: seed {seed}, {a.runs} mutants per target (replay: SB_FUZZ_SEED={seed} "
          f"{sys.argv[0]} {a.build} --runs {a.runs})", flush=True)
    failed = 0
    for name, (seeds, argv) in targets(sb, tmp).items():
        inputs = seeds + [mutate(rng, rng.choice(seeds)) for _ in range(a.runs)]
        for i, text in enumerate(inputs):
            path = os.path.join(tmp, f"in-{name.replace('/', '-')}-{i}.json")
            with open(path, "w") as f:
                f.write(text)
            errs, _ = test_sweep.execute(argv + [path], None, 60 * scale,
                                         "no strategy with status ok")
            if errs:
                failed += 1
                keep = os.path.join(tempfile.gettempdir(), f"sbfuzz-{name.replace('/', '-')}-"
                                    f"{seed}-{i}.json")
                with open(keep, "w") as f:
                    f.write(text)
                print(f"FAIL {name}: {' '.join(argv)} {keep}\n  " + "\n  ".join(errs), flush=True)
        print(f"fuzz_configs: {name}: {len(inputs)} inputs", flush=True)
    print(f"fuzz_configs: {failed} failed; seed {seed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
