#!/usr/bin/python3
# Lists every skipped test of the last ctest run with its reason, from the ctest log: whole
# ctest entries that exited 77 (their "SKIP: why" line), GoogleTest cases that called
# GTEST_SKIP (file:line and message) inside any entry, and Python unittest skips. Run by
# ci/test.sh after ctest so a skip is always visible in the summary. Usage: skip_summary.py LOG
import re
import sys


def skips(text):
    out = []
    for section in re.split(r"^\d+/\d+ Testing: ", text, flags=re.M)[1:]:
        name = section.split("\n", 1)[0].strip()
        lines = section.splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"^(.*:\d+): Skipped$", line)
            if m:  # GoogleTest: the message follows, then "[  SKIPPED ] Suite.Test"
                reason, j = [], i + 1
                while j < len(lines) and "[  SKIPPED ]" not in lines[j]:
                    reason.append(lines[j].strip())
                    j += 1
                case = lines[j].split("]", 1)[1].split("(")[0].strip() if j < len(lines) else "?"
                where = name if name.endswith(case) else f"{name}: {case}"  # discovered: same
                out.append(f"{where}: {' '.join(r for r in reason if r) or '(no reason given)'}")
            m = re.search(r"\.\.\. skipped '(.*)'$", line)
            if m:  # unittest: "test_x (module.Class) ... skipped 'why'"
                out.append(f"{name}: {line.split(' ... ')[0].strip()}: {m.group(1)}")
            if line.startswith("SKIP: "):  # an entry that exits 77 says why first
                out.append(f"{name}: {line[len('SKIP: '):]}")
    return sorted(set(out), key=out.index)


def main(argv):
    path = argv[0] if argv else "build/Testing/Temporary/LastTest.log"
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError as e:
        print(f"skip summary: cannot read {path}: {e.strerror}")
        return 1
    found = skips(re.sub(r"\x1b\[[0-9;]*m", "", text))  # GoogleTest's colours
    print(f"Skipped tests and why ({len(found)}):" if found else "Skipped tests: none")
    for s in found:
        print(f"  SKIPPED {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
