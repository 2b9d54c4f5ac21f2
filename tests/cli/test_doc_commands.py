#!/usr/bin/python3
# Every `shardbench ...` command in a code block of README.md and docs/*.md, checked against
# the binary: its subcommand exists and each --flag is one `shardbench SUB --help` lists, and
# every `predict` command runs (no MPI; a second or less each) with exit 0. So no documented
# command rots when a flag is renamed. Usage: test_doc_commands.py BUILD_DIR
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else os.path.join(ROOT, "build")
SB = os.path.join(BUILD, "shardbench")
SUBCOMMANDS = ("run", "predict", "export", "report", "validate", "compare")


def documented_commands():
    """(file, line, argv after `shardbench`) for every command line in a fenced code block."""
    out = []
    for path in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        fence = False
        lines = open(path).read().split("\n")
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.lstrip().startswith("```"):
                fence = not fence
                i += 1
                continue
            text, start = line, i
            while fence and text.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
            m = re.match(r"^\s*(?:\$ )?(?:\./)?(?:build/)?shardbench (.*)$", text) if fence else None
            if not m or "..." in m.group(1) or "<" in m.group(1):
                continue
            if re.match(r"^(\S+ )?--?\S*:|^\S*:", m.group(1)):  # printed output, not a command
                continue
            cmd = re.split(r"\s(?:\||>|&&|#)\s?", m.group(1))[0]
            out.append((os.path.relpath(path, ROOT), start + 1, shlex.split(cmd)))
        # inline code spans in the prose: `shardbench run --np 4 ...` (may wrap a line)
        text = open(path).read()
        for m in re.finditer(r"`(?:\./)?(?:build/)?shardbench ((?:run|predict|export|report|validate|compare)[^`]*)`", text):
            cmd = " ".join(m.group(1).split())
            if "..." in cmd or "…" in cmd or "<" in cmd or "|" in cmd.split("--")[0]:
                continue
            line = text.count("\n", 0, m.start()) + 1
            try:
                out.append((os.path.relpath(path, ROOT), line, shlex.split(cmd)))
            except ValueError:
                continue
    return out


def help_flags(sub):
    argv = [sys.executable, os.path.join(ROOT, "plots", "compare.py"), "--help"] \
        if sub == "compare" else [SB, sub, "--help"]
    text = subprocess.run(argv, capture_output=True, text=True).stdout
    return set(re.findall(r"(--[a-z0-9][a-z0-9-]*)", text))


class DocCommandsTest(unittest.TestCase):
    def test_documented_commands_parse_and_predictions_run(self):
        cmds = documented_commands()
        self.assertGreater(len(cmds), 10)
        flags = {s: help_flags(s) for s in SUBCOMMANDS}
        flags["--version"] = set()
        tmp = tempfile.mkdtemp(prefix="sbdoc")
        for path, line, argv in cmds:
            with self.subTest(f"{path}:{line}: shardbench {' '.join(argv)}"):
                self.assertIn(argv[0], list(SUBCOMMANDS) + ["--version", "--help"])
                if argv[0] in ("--version", "--help"):
                    continue
                for a in argv[1:]:
                    if a.startswith("--") and "bad-input" not in path:
                        self.assertIn(a.split("=")[0], flags[argv[0]])
                placeholder = any("|" in a or re.fullmatch(r"[A-Z][A-Z_]*", a) for a in argv)
                bad_input = path == os.path.join("docs", "bad-input.md")  # meant to exit 2
                if bad_input and argv[0] == "predict" and not placeholder:
                    p = subprocess.run([SB, *argv], capture_output=True, text=True, cwd=ROOT,
                                       timeout=120)
                    self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                    continue
                if bad_input:
                    continue
                complete = "--model" in argv or "--params" in argv or "--show-cluster" in argv
                if argv[0] == "predict" and "--sweep" not in argv and complete and not placeholder:
                    argv = [a for a in argv]
                    if "--json" in argv:  # write into a scratch folder, not the checkout
                        argv[argv.index("--json") + 1] = os.path.join(tmp, "p.json")
                    p = subprocess.run([SB, *argv], capture_output=True, text=True, cwd=ROOT,
                                       timeout=120)
                    self.assertEqual(p.returncode, 0, p.stderr)


class ReadmeTest(unittest.TestCase):
    def test_readme_is_short_and_its_strategy_table_is_whole(self):
        # A newcomer's page (<= 300 lines); the strategy table one contiguous block with a row
        # per registered strategy (a paragraph inside a Markdown table ends it).
        lines = open(os.path.join(ROOT, "README.md")).read().split("\n")
        self.assertLessEqual(len(lines), 300)
        start = lines.index("| strategy | sharded at rest (group) | collectives in one step | granularity |")
        end = start
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        rows = [re.match(r"\| `([a-z0-9_]+)` \|", l).group(1) for l in lines[start + 2:end]]
        p = subprocess.run([SB, "run", "--model", "tiny", "--strategies", "no-such", "--out",
                            os.path.join(tempfile.mkdtemp(), "x.json")], capture_output=True, text=True)
        registered = p.stderr.strip().split("allowed: all or ")[1].split(",")
        self.assertEqual(rows, registered)

    def test_every_docs_page_is_linked_from_the_reference(self):
        text = open(os.path.join(ROOT, "README.md")).read()
        ref = text[text.index("## Reference"):]
        for page in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
            name = "docs/" + os.path.basename(page)
            with self.subTest(name):
                self.assertIn(f"]({name})", ref)


if __name__ == "__main__":
    unittest.main()
