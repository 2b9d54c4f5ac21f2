#!/usr/bin/env python3
"""The README's per-strategy tables, written from results files rather than by hand.

    plots/strategy_table.py FILE[=LABEL] ... [--time]

One markdown row per strategy of every file, in the order given; LABEL (e.g. the flags that
made the file) goes in the second column. Bytes are sent bytes per step summed over ranks,
collectives are per step on one rank, memory is per rank; the last columns are the measured /
predicted ratios the run itself wrote (residuals.ratio). --time adds the median step and MFU.
"""
import argparse
import json
import sys

MIB = 1024.0 * 1024.0


def collectives(result):
    per_step = result["comm"]["per_step"]["collectives"]
    kinds = ", ".join(f"{k['count']} {k['kind'].replace('_', '-')}/{k['group']}"
                      for k in result["comm"].get("by_kind", []))
    return f"{per_step} ({kinds})" if kinds else str(per_step)


def ratio(result, key):
    value = result.get("residuals", {}).get("ratio", {}).get(key)
    return "–" if value is None else f"{value:.3f}"


def row(result, label, with_time):
    per_step = result["comm"]["per_step"]
    memory = result["memory"]
    state = sum(memory["model_state_bytes_per_rank"].values())
    state_ratio = ratio(result, "model_state_params")
    cells = [f"`{result['strategy']}`", label,
             f"{per_step['sent_bytes_intra'] / MIB:.1f}", f"{per_step['sent_bytes_inter'] / MIB:.1f}",
             collectives(result), f"{memory['peak_bytes_per_rank'] / MIB:.1f}", f"{state / MIB:.1f}",
             f"{ratio(result, 'sent_bytes_intra')} / {ratio(result, 'sent_bytes_inter')} / {state_ratio}",
             ratio(result, "peak_bytes_per_rank")]
    if with_time:
        cells += [f"{result['step_time_s']['median']:.3f}", f"{result['throughput']['mfu']:.2f}"]
    return "| " + " | ".join(cells) + " |"


def header(with_time):
    names = ["strategy", "settings", "intra MiB/step", "inter MiB/step",
             "collectives/step (kind/group)", "peak MiB/rank", "model state MiB/rank",
             "measured/predicted bytes intra / inter / state", "peak measured/predicted"]
    align = ["---", "---", "---:", "---:", "---", "---:", "---:", "---:", "---:"]
    if with_time:
        names += ["step s (median)", "MFU"]
        align += ["---:", "---:"]
    return ["| " + " | ".join(names) + " |", "|" + "|".join(align) + "|"]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", metavar="FILE[=LABEL]")
    parser.add_argument("--time", action="store_true", help="add median step time and MFU")
    args = parser.parse_args(argv)
    lines = header(args.time)
    for spec in args.files:
        path, _, label = spec.partition("=")
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print(f"strategy_table.py: {path}: {e}", file=sys.stderr)
            return 2
        if doc.get("kind") == "prediction":
            print(f"strategy_table.py: {path}: a prediction, not a run", file=sys.stderr)
            return 2
        for result in doc.get("results", []):
            if result.get("status") == "ok":
                lines.append(row(result, label or "default", args.time))
            else:
                lines.append(f"| `{result.get('strategy')}` | {label or 'default'} | "
                             f"{result.get('status')}: {result.get('error', '')} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
