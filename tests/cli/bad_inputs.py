#!/usr/bin/python3
# The bad inputs the suite must reject with one line naming the flag and exit code 2, and
# nothing written. Imported by test_cli.py; run directly it prints the README's table:
#   tests/cli/bad_inputs.py BUILD_DIR
import os
import subprocess
import sys
import tempfile

# (arguments after `shardbench`, text the message must contain)
CASES = [
    (["run", "--model", "huge"], "--model"),
    (["run", "--model", "2,30,4,16,64"], "heads"),
    (["run", "--model", "0,32,4,16,64"], "layers"),
    (["run", "--model", "2,32,4,16"], "--model"),
    (["run", "--model", "a,b,c,d,e"], "not an integer"),
    (["run", "--model", "tiny", "--strategies", "zero4"], "--strategies"),
    (["run", "--model", "tiny", "--strategies", "ddp,,zero1"], "--strategies"),
    (["run", "--model", "tiny", "--precision", "fp16"], "--precision"),
    (["run", "--model", "tiny", "--attention", "flash"], "--attention"),
    (["run", "--model", "tiny", "--wrap", "every-0"], "--wrap"),
    (["run", "--model", "tiny", "--wrap", "layer"], "--wrap"),
    (["run", "--model", "tiny", "--overlap", "maybe"], "--overlap"),
    (["run", "--model", "tiny", "--collectives", "tree"], "--collectives"),
    (["run", "--model", "tiny", "--limit-all-gathers", "2"], "--limit-all-gathers"),
    (["run", "--model", "tiny", "--backward-prefetch", "later"], "--backward-prefetch"),
    (["run", "--model", "tiny", "--batch", "0"], "--batch"),
    (["run", "--model", "tiny", "--batch", "abc"], "--batch"),
    (["run", "--model", "tiny", "--steps", "-1"], "--steps"),
    (["run", "--model", "tiny", "--warmup", "-2"], "--warmup"),
    (["run", "--model", "tiny", "--bucket-mb", "0"], "--bucket-mb"),
    (["run", "--model", "tiny", "--mem-limit-gb", "-1"], "--mem-limit-gb"),
    (["run", "--model", "tiny", "--timeout-s", "0"], "--timeout-s"),
    (["run", "--model", "tiny", "--lr", "0"], "--lr"),
    (["run", "--model", "tiny", "--prefetch-elements", "0"], "--prefetch-elements"),
    (["run", "--model", "tiny", "--device", "tpu"], "--device"),
    (["run", "--model", "tiny", "--np", "3", "--ranks-per-node", "2"], "--ranks-per-node"),
    (["run", "--model", "tiny", "--inject-fault", "1:x:boom"], "--inject-fault"),
    (["run", "--model", "tiny", "--seq", "17"], "context"),
    (["run", "--model", "tiny", "--seq", "-3"], "--seq"),
    (["run", "--model", "tiny", "--bogus-flag"], "bogus"),
    # signed values for unsigned flags, counts, duplicates, absurd limits
    (["run", "--model", "tiny", "--seed", "-1"], "--seed"),
    (["run", "--model", "tiny", "--prefetch-elements", "-1"], "--prefetch-elements"),
    (["run", "--model", "tiny", "--persist-elements", "1.5"], "--persist-elements"),
    (["run", "--model", "tiny", "--np", "0"], "--np"),
    (["run", "--model", "tiny", "--strategies", "ddp,ddp,zero1"], "listed twice"),
    (["run", "--model", "tiny", "--timeout-s", "0.000001"], "--timeout-s"),
    (["run", "--model", "tiny", "--seed", "0x10"], "--seed"),
    (["run", "--model", "tiny", "--peak-gflops", "inf"], "--peak-gflops"),
    # output paths, checked before the first strategy (and before mpirun starts)
    (["run", "--model", "tiny", "--out", "/tmp"], "is a directory"),
    (["run", "--model", "tiny", "--np", "2", "--out", "/tmp"], "is a directory"),
    (["run", "--model", "tiny", "--out", "/proc/sb.json"], "cannot create files in '/proc'"),
    (["run", "--model", "tiny", "--out", "/dev/null/r.json"], "cannot create directory"),
    (["run", "--model", "tiny", "--out", "/dev/null"], "not a regular file"),
    (["launch"], "launch"),
    (["export", "--format", "csv", "x.json"], "--format"),
    (["export", "--format", "bencher", "/nonexistent.json"], "cannot open"),
    (["export", "--format", "bencher", "x.json", "--out", "/tmp"], "--out /tmp: is a directory"),
    (["export", "--format", "bencher", "x.json", "--out", "/proc/sb.json"], "--out /proc/sb.json"),
    (["predict", "--params", "-5"], "--params"),
    (["predict", "--params", "0"], "--params"),
    (["predict", "--model", "tiny", "--attention", "sdpa"], "--attention"),
    (["predict", "--params", "7.25"], "--params"),
    (["predict", "--model", "tiny", "--prefetch-elements", "-1"], "--prefetch-elements"),
    (["predict", "--model", "tiny", "--mem-limit-gb", "inf"], "--mem-limit-gb"),
    (["predict", "--model", "tiny", "--json", "/tmp"], "--json /tmp: is a directory"),
    (["predict", "--model", "tiny", "--json", "/proc/p.json"], "--json /proc/p.json"),
]


def run_case(sb, args):
    out = os.path.join(tempfile.mkdtemp(prefix="sbbad"), "never.json")
    extra = ["--out", out] if args[0] == "run" and "--out" not in args else []
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run([sb, *args, *extra], capture_output=True, text=True, timeout=60, env=env)
    return p, out


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    sb = os.path.join(build, "shardbench")
    print("| command | exit | message |")
    print("|---|---|---|")
    for args, _ in CASES:
        p, _ = run_case(sb, args)
        msg = (p.stderr.strip().splitlines() or [""])[0].replace("|", "\\|")
        print(f"| `shardbench {' '.join(args)}` | {p.returncode} | {msg} |")


if __name__ == "__main__":
    main()
