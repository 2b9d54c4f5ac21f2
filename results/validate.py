#!/usr/bin/python3
# Validates shardbench results files against results/schema.json, plus a few cross-field
# consistency checks a schema cannot express; also the one loader plots/ uses for results files.
# Does not judge the numbers (plots/compare.py does); never prints a traceback for bad input.
"""Validate shardbench results files.

usage: python3 results/validate.py FILE.json [FILE.json ...]

Prints one line per file ("ok" or the problems, each naming the JSON path, e.g.
"$.results[3].memory.peak_bytes_per_rank (strategy zero3): 'x' is not of type 'integer'").
Exit status: 0 when every file is valid, 1 otherwise (including unreadable, non-JSON or
non-shardbench files).
"""
import json
import os
import re
import statistics
import sys
from pathlib import Path

SCHEMA_PATH = Path(__file__).resolve().with_name("schema.json")
SYSTEM_PYTHON = "/usr/bin/python3"
MAX_ERRORS_SHOWN = 20


def ensure_system_python(modules):
    """Re-exec under Debian's /usr/bin/python3 when `modules` are missing from this one.

    The suite uses only Debian packages (python3-matplotlib, -numpy, -jsonschema); a `python3`
    earlier on PATH (pyenv, a venv) may lack them. Set SB_NO_REEXEC=1 to disable."""
    missing = []
    for m in modules:
        try:
            __import__(m)
        except ImportError:
            missing.append(m)
    if not missing:
        return
    here = os.path.realpath(sys.executable or "")
    if (os.environ.get("SB_NO_REEXEC") != "1" and os.access(SYSTEM_PYTHON, os.X_OK)
            and os.path.realpath(SYSTEM_PYTHON) != here):
        os.environ["SB_NO_REEXEC"] = "1"  # one hop at most
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)
    sys.exit(f"error: python module(s) {', '.join(missing)} missing for {sys.executable}; "
             "install the Debian packages with ci/setup.sh")


class BadInput(Exception):
    """A file that is not a readable shardbench results file; str() is a one-line message."""


def _reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def load_results(path):
    """Parses `path` and checks it is a shardbench results file (not yet the schema).

    Returns the document; raises BadInput with a one-line reason otherwise."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not a results file (not UTF-8 text)") from None
    if not text.strip():
        raise BadInput(f"{path}: not a results file (empty)")
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") \
            from None
    except (ValueError, RecursionError) as e:
        raise BadInput(f"{path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise BadInput(f"{path}: not a shardbench results file (top level is "
                       f"{type(doc).__name__}, expected an object)")
    if doc.get("suite") != "shardbench":
        raise BadInput(f"{path}: not a shardbench results file (suite is "
                       f"{doc.get('suite', 'missing')!r}, expected 'shardbench')")
    return doc


def load_run_results(path):
    """load_results() for the tools that read measurements (plots, compare): a prediction
    document (kind "prediction", from `shardbench predict --json`) is refused with BadInput."""
    doc = load_results(path)
    if doc.get("kind", "run") != "run":
        raise BadInput(f"{path}: a prediction (kind {doc.get('kind')!r}), not a run's results; "
                       "this tool reads what `shardbench run --out` writes")
    return doc


def json_path(parts, doc=None):
    """['results', 3, 'memory'] -> "$.results[3].memory (strategy zero3)"."""
    out = "$"
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p):
            out += f".{p}"
        else:
            out += f"[{json.dumps(p)}]"
    parts = list(parts)
    if doc is not None and len(parts) >= 2 and parts[0] == "results" and isinstance(parts[1], int):
        try:
            name = doc["results"][parts[1]].get("strategy")
            if isinstance(name, str):
                out += f" (strategy {name})"
        except (KeyError, IndexError, TypeError, AttributeError):
            pass
    return out


_validator = None


def _get_validator():
    global _validator
    if _validator is None:
        try:
            import jsonschema
        except ImportError:
            raise BadInput("python3-jsonschema is not installed (run ci/setup.sh)") from None
        schema = json.loads(SCHEMA_PATH.read_text())
        cls = getattr(jsonschema, "Draft202012Validator", None) or jsonschema.Draft7Validator
        cls.check_schema(schema)
        _validator = cls(schema)
    return _validator


def schema_errors(doc):
    """Schema violations of `doc`, each "JSON.path: message", sorted by path."""
    errs = sorted(_get_validator().iter_errors(doc),
                  key=lambda e: [(0, p, "") if isinstance(p, int) else (1, 0, p)
                                 for p in e.absolute_path])
    seen, out = set(), []
    for e in errs:
        msg = f"{json_path(e.absolute_path, doc)}: {e.message}"
        if msg not in seen:
            seen.add(msg)
            out.append(msg)
    return out


def _num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def fault_errors(r, i, doc):
    """memory.page_faults_per_step: median and max agree with the samples, steady with the
    median of minor + major against the threshold (harness/launch/report.cc)."""
    f = (r.get("memory") or {}).get("page_faults_per_step") if isinstance(r.get("memory"), dict) \
        else None
    if not isinstance(f, dict):
        return []
    where = json_path(["results", i, "memory", "page_faults_per_step"], doc)
    out = []
    for kind in ("minor", "major"):
        c = f.get(kind) or {}
        xs = c.get("samples") or []
        if xs and (c.get("max") != max(xs) or abs(c.get("median", -1) - statistics.median(xs)) > 1e-9):
            out.append(f"{where}.{kind}: median/max {c.get('median')}/{c.get('max')} do not match "
                       f"the samples {xs}")
    total = [a + b for a, b in zip((f.get("minor") or {}).get("samples") or [],
                                   (f.get("major") or {}).get("samples") or [])]
    if total and f.get("steady") != (statistics.median(total) <= f.get("threshold", 0)):
        out.append(f"{where}: steady is {f.get('steady')} but the median step faults "
                   f"{statistics.median(total)} against a threshold of {f.get('threshold')}")
    return out


def consistency_errors(doc):
    """Cross-field checks the schema cannot express; skips whatever the schema already flags."""
    out = []
    cfg = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    w, g, m = cfg.get("world_size"), cfg.get("ranks_per_node"), cfg.get("num_nodes")
    if all(isinstance(v, int) for v in (w, g, m)) and w != g * m:
        out.append(f"$.config: world_size {w} != ranks_per_node {g} x num_nodes {m}")
    results = doc.get("results") if isinstance(doc.get("results"), list) else []
    seen = {}
    for i, r in enumerate(results):
        if not isinstance(r, dict):
            continue
        name = r.get("strategy")
        if isinstance(name, str):
            if name in seen:
                out.append(f"{json_path(['results', i], doc)}: strategy also at "
                           f"$.results[{seen[name]}]")
            seen.setdefault(name, i)
        if r.get("status") != "ok":
            continue
        st = r.get("step_time_s")
        if isinstance(st, dict) and all(_num(st.get(k)) for k in ("min", "median", "p95", "max")):
            eps = 1e-12 + 1e-9 * abs(st["max"])
            if not (st["min"] - eps <= st["median"] <= st["p95"] + eps <= st["max"] + 2 * eps):
                out.append(f"{json_path(['results', i, 'step_time_s'], doc)}: expected "
                           f"min <= median <= p95 <= max, got {st['min']}, {st['median']}, "
                           f"{st['p95']}, {st['max']}")
        out.extend(fault_errors(r, i, doc))
        ps = (r.get("comm") or {}).get("per_step") if isinstance(r.get("comm"), dict) else None
        if isinstance(ps, dict) and all(_num(ps.get(k)) for k in
                                        ("sent_bytes_intra", "sent_bytes_inter",
                                         "sent_bytes_max_rank")):
            if ps["sent_bytes_max_rank"] > ps["sent_bytes_intra"] + ps["sent_bytes_inter"]:
                out.append(f"{json_path(['results', i, 'comm', 'per_step'], doc)}: "
                           "sent_bytes_max_rank exceeds intra + inter summed over ranks")
    return out


def check_file(path):
    """Returns (doc, problems). Raises BadInput for unreadable / foreign files."""
    doc = load_results(path)
    problems = schema_errors(doc)
    if not problems:
        problems = consistency_errors(doc)
    return doc, problems


def summary(doc):
    rs = [r for r in doc.get("results", []) if isinstance(r, dict)]
    by = {}
    for r in rs:
        by[r.get("status")] = by.get(r.get("status"), 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in sorted(by.items(), key=lambda kv: str(kv[0])))
    return f"kind {doc.get('kind')}, {len(rs)} strategies ({parts})"


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 1
    bad = 0
    for path in argv:
        try:
            doc, problems = check_file(path)
        except BadInput as e:
            print(f"INVALID {e}")
            bad += 1
            continue
        if not problems:
            print(f"ok {path}: {summary(doc)}")
            continue
        bad += 1
        print(f"INVALID {path}: {len(problems)} problem(s)")
        for p in problems[:MAX_ERRORS_SHOWN]:
            print(f"  {p}")
        if len(problems) > MAX_ERRORS_SHOWN:
            print(f"  ... and {len(problems) - MAX_ERRORS_SHOWN} more")
    return 1 if bad else 0


if __name__ == "__main__":
    ensure_system_python(["jsonschema"])
    sys.exit(main(sys.argv[1:]))
