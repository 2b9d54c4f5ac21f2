#!/usr/bin/env python3
"""Fails when a source file includes a project header from a higher layer.

Folders are layers and include only downward (or within their own layer). The order is
written once, here; tests/ may include anything. Exceptions are listed with their reason.
Usage: check_layers.py [SOURCE_DIR]
"""
import os
import re
import sys
import tempfile

# Lowest first. A path belongs to the first layer whose prefix it starts with. From the
# strategies up, each layer folder is one CMake library (CMakeLists.txt: sb_strategies, sb_train,
# sb_predict, sb_launch), so the link order follows this one too.
LAYERS = [
    ("common", ["harness/common/", "harness/core/"]),
    ("base", ["harness/device/", "harness/memory/", "harness/comm/", "harness/model/",
              "harness/optim/", "harness/topology."]),
    ("strategies", ["strategies/"]),
    ("train", ["harness/train/"]),
    ("predict", ["harness/predict/"]),
    ("launch", ["harness/launch/"]),
    ("bench", ["bench/"]),
]

# (including file, included header): why it may point up. Keep this short; it is empty today.
EXCEPTIONS = {}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(path.startswith(p) for p in prefixes):
            return rank
    return None


def violations(root):
    out = []
    for top in ("harness", "strategies", "bench"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc", ".cu", ".cuh")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                mine = layer_of(path)
                if mine is None:  # a new folder must be given its place in the order
                    out.append(f"{path}: in no layer (add its folder to LAYERS)")
                    continue
                with open(os.path.join(root, path), encoding="utf-8") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        theirs = layer_of(m.group(1))
                        if theirs is None or theirs <= mine:
                            continue
                        if (path, m.group(1)) in EXCEPTIONS:
                            continue
                        out.append(f"{path}:{lineno}: includes {m.group(1)} "
                                   f"(layer {LAYERS[mine][0]} may not include {LAYERS[theirs][0]})")
    return out


def self_test():
    """The check must see an upward include and pass a downward one."""
    with tempfile.TemporaryDirectory() as t:
        os.makedirs(os.path.join(t, "harness", "comm"))
        os.makedirs(os.path.join(t, "harness", "train"))
        with open(os.path.join(t, "harness", "comm", "up.h"), "w") as f:
            f.write('#include "harness/common/check.h"\n#include "strategies/strategy.h"\n')
        with open(os.path.join(t, "harness", "train", "up.cc"), "w") as f:
            f.write('#include "strategies/strategy.h"\n#include "harness/launch/trainer.h"\n')
        found = sorted(violations(t))
        return (len(found) == 2 and "harness/comm/up.h:2" in found[0]
                and "harness/train/up.cc:2" in found[1])


def main():
    if not self_test():
        print("self-test failed: an upward include in a scratch tree was not reported")
        return 1
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    bad = violations(os.path.abspath(root))
    for line in bad:
        print(line)
    stale = [k for k in EXCEPTIONS if not os.path.exists(os.path.join(root, k[0]))]
    for k in stale:
        print(f"stale exception: {k[0]} no longer exists")
    if bad or stale:
        print(f"{len(bad)} include(s) point up a layer; order: "
              + " -> ".join(n for n, _ in LAYERS))
        return 1
    print("layers: every include points down or sideways")
    return 0


if __name__ == "__main__":
    sys.exit(main())
