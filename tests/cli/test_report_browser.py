#!/usr/bin/python3
# The HTML report in a real browser: `shardbench report` on a real run (with baseline, history
# and traces) opened by Debian's headless Chromium, which must log no console message, make no
# request and fail no resource; the page must show one row per strategy. The same check must
# reject a page that logs an error or fetches from the network. Usage: test_report_browser.py
# BUILD_DIR
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else os.path.join(ROOT, "build")
SB = os.path.join(BUILD, "shardbench")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1", OMPI_MCA_mpi_yield_when_idle="1")


def registered_strategies():
    """Every strategy the binary registers, from its one-line refusal of an unknown name."""
    out = os.path.join(tempfile.mkdtemp(prefix="sbnames"), "never.json")
    p = subprocess.run([SB, "run", "--model", "tiny", "--strategies", "no-such-strategy",
                        "--out", out], capture_output=True, text=True, env=ENV)
    return p.stderr.strip().split("allowed: all or ")[1].split(",")


STRATEGIES = registered_strategies()  # the run below runs --strategies all


def read(path):
    with open(path) as f:
        return f.read()


def sb(*args):
    return subprocess.run([SB, *args], env=ENV, capture_output=True, text=True, timeout=300)


def open_in_chromium(path, profile):
    """(DOM after load, [console lines]) of `path` in headless Chromium."""
    p = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                        f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                        "--virtual-time-budget=5000", "--dump-dom", "file://" + path],
                       capture_output=True, text=True, timeout=120)
    console = [ln for ln in p.stderr.splitlines() if re.search(r":CONSOLE[:(]", ln)]
    return p.stdout, console


def page_problems(dom, console):
    """What is wrong with a page as the browser saw it ([] = nothing), and its row count."""
    m = re.search(r'<pre id="sb-selfcheck"[^>]*data-rows="(\d+)" data-errors="(\d+)"[^>]*>'
                  r'([^<]*)</pre>', dom)
    if not m:
        return ["the page's self-check did not run"] + console, 0
    problems = list(console)
    if m.group(2) != "0":
        problems += m.group(3).splitlines()
    return problems, int(m.group(1))


class ReportInBrowser(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sbreport")
        cls.profile = os.path.join(cls.tmp, "profile")
        run = os.path.join(cls.tmp, "run.json")
        trace = os.path.join(cls.tmp, "trace")
        p = sb("run", "--quiet", "--np", "4", "--ranks-per-node", "2", "--model", "tiny",
               "--strategies", "all", "--steps", "2", "--warmup", "1", "--trace", trace,
               "--out", run)
        assert p.returncode == 0, p.stderr
        hist = os.path.join(cls.tmp, "nightly")  # two dated runs, as ci/nightly.sh leaves them
        os.makedirs(hist)
        doc = json.loads(read(run))
        for day in ("20261129T023000Z", "20261130T023000Z"):
            doc["created_utc"] = f"{day[:4]}-{day[4:6]}-{day[6:8]}T02:30:00Z"
            with open(os.path.join(hist, day + ".json"), "w") as f:
                json.dump(doc, f)
        cls.page = os.path.join(cls.tmp, "report.html")
        cls.proc = sb("report", run, "--baseline", os.path.join(hist, "20261129T023000Z.json"),
                      "--history", hist, "--trace-dir", trace, "--out", cls.page)

    def test_report_written(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        text = read(self.page)
        for section in ('id="results"', 'id="phases"', 'id="residuals"', 'id="baseline"',
                        "Trends (nightly history)", 'id="fig-phases"', 'id="fig-timeline"'):
            self.assertIn(section, text)
        self.assertNotIn("not drawn", text)
        # Offline by construction: nothing to fetch.
        self.assertIsNone(re.search(r'(src|href)="(https?:)?//', text))

    def test_page_loads_cleanly_with_one_row_per_strategy(self):
        dom, console = open_in_chromium(self.page, self.profile)
        problems, rows = page_problems(dom, console)
        self.assertEqual(problems, [])
        self.assertEqual(rows, len(STRATEGIES))
        for s in STRATEGIES:
            self.assertIn(f"<td>{s}</td>", dom)

    def test_the_check_catches_console_errors_and_requests(self):
        text = read(self.page)
        bad = os.path.join(self.tmp, "bad.html")
        with open(bad, "w") as f:  # the same page plus an error and a fetch
            f.write(text.replace("</body>", '<img src="http://127.0.0.1:9/x.png">'
                                 '<script>console.error("boom")</script></body>'))
        problems, rows = page_problems(*open_in_chromium(bad, self.profile))
        self.assertTrue(any("boom" in p for p in problems), problems)
        self.assertTrue(any("127.0.0.1:9" in p for p in problems), problems)
        self.assertEqual(rows, len(STRATEGIES))

    def test_bad_input_exits_2(self):
        p = sb("report", os.path.join(self.tmp, "missing.json"), "--out", self.page + ".x")
        self.assertEqual(p.returncode, 2)
        self.assertIn("missing.json", p.stderr)
        self.assertFalse(os.path.exists(self.page + ".x"))


if __name__ == "__main__":
    if not os.access(CHROMIUM, os.X_OK):
        sys.exit(f"no {CHROMIUM}: ci/setup.sh installs Debian's chromium")
    unittest.main(verbosity=2)
