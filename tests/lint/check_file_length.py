#!/usr/bin/env python3
"""Fails when a file under strategies/ is longer than the budget (250 lines).

A strategy is a policy a reader should take in at one sitting; what two policies share goes in
a named helper of its own (buckets.h, param_groups.h, zero3_params.h), not in a longer file.
Usage: check_file_length.py [SOURCE_DIR]
"""
import os
import sys
import tempfile

from check_function_length import source_files

LIMIT = 250
SCANNED = ("strategies",)


def long_files(root):
    out = []
    for path in source_files(root, SCANNED):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > LIMIT:
            out.append((path, n))
    return sorted(out)


def self_test():
    """The scan must see a 251-line file and pass a 250-line one."""
    with tempfile.TemporaryDirectory() as t:
        os.makedirs(os.path.join(t, "strategies"))
        for name, n in (("ok.cc", LIMIT), ("long.h", LIMIT + 1)):
            with open(os.path.join(t, "strategies", name), "w") as f:
                f.write("".join(f"// {i}\n" for i in range(n)))
        return long_files(t) == [(os.path.join("strategies", "long.h"), LIMIT + 1)]


def main():
    if not self_test():
        print("self-test failed: the scan missed a long file in a scratch tree")
        return 1
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    bad = long_files(root)
    for path, n in bad:
        print(f"{path}: {n} lines (limit {LIMIT})")
    where = ", ".join(SCANNED)
    print(f"{len(bad)} file(s) under {where} longer than {LIMIT} lines" if bad else
          f"file length: every file under {where} has at most {LIMIT} lines")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
