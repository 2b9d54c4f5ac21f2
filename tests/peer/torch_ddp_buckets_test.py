#!/usr/bin/python3
"""shardbench's `ddp` as shipped against PyTorch DDP itself (Debian's python3-torch, gloo):
on the same shape (small, 2 ranks), the all-reduces of one steady-state step must be the same
in number, total bytes and sizes (power-of-two histogram) as the buckets PyTorch's Reducer
all-reduces, counted by a comm hook (bench/torch_ddp.py --count-buckets). Checked for the
default bucket_cap_mb (25: the 1 MiB first bucket, then one bucket) and bucket_cap_mb 1 (13
buckets, where the closing rule and the gradient-ready order decide every boundary), and with
gradient_as_bucket_view. Exits 77 (skipped, with the reason) where torch is not installed.
Usage: torch_ddp_buckets_test.py BUILD_DIR"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def have_torch():
    return subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed"],
                          capture_output=True).returncode == 0


def pow2_histogram(sizes):
    hist = {}
    for s in sizes:
        le = 1
        while le < s:
            le <<= 1
        hist[le] = hist.get(le, 0) + 1
    return hist


def torch_buckets(cap_mb, view):
    cmd = ["/usr/bin/python3", os.path.join(ROOT, "bench/torch_ddp.py"), "--world", "2",
           "--batch", "1", "--steps", "1", "--warmup", "1", "--model", "small",
           "--bucket-mb", str(cap_mb), "--count-buckets"]
    if view:
        cmd.append("--gradient-as-bucket-view")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True).stdout
    return [b["bytes"] for b in json.loads(out.strip().splitlines()[-1])["last_step_buckets"]]


def shardbench_all_reduces(build, tmp, cap_mb, view):
    cfg = os.path.join(tmp, "ddp.json")
    with open(cfg, "w") as f:
        json.dump({"bucket_cap_mb": cap_mb, "gradient_as_bucket_view": view}, f)
    out = os.path.join(tmp, "out.json")
    subprocess.run([os.path.join(build, "shardbench"), "run", "--np", "2", "--model", "small",
                    "--strategies", "ddp", "--batch", "1", "--steps", "1", "--warmup", "1",
                    "--ddp-config", cfg, "--out", out, "--quiet"],
                   check=True, timeout=600, stdout=subprocess.DEVNULL)
    r = json.load(open(out))["results"][0]
    assert r["status"] == "ok", r
    ar = [k for k in r["comm"]["by_kind"] if k["kind"] == "all_reduce"]
    hist = {h["bucket_bytes_le"]: h["count"] for h in r["comm"]["size_histogram"]}
    return ar[0]["count"], ar[0]["bytes"], hist


def main(argv):
    if not have_torch():
        print("SKIP: no torch in /usr/bin/python3 (ci/setup_peer.sh installs Debian's python3-torch)")
        return 77
    build = argv[0]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for cap_mb, view in ((25, False), (1, False), (1, True)):
            peer = torch_buckets(cap_mb, view)
            count, total, hist = shardbench_all_reduces(build, tmp, cap_mb, view)
            want = (len(peer), sum(peer), pow2_histogram(peer))
            got = (count, total, hist)
            ok = got == want
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} bucket_cap_mb={cap_mb} view={view}: torch "
                  f"{len(peer)} buckets {sum(peer)} B {peer}; shardbench {count} all-reduces "
                  f"{total} B histogram {hist}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
