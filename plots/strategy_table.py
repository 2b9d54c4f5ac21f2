#!/usr/bin/env python3
"""The per-strategy tables of docs/measured.md, written from results files rather than by hand.

    plots/strategy_table.py FILE[=LABEL] ... [--time | --psi]

One markdown row per strategy of every file, in the order given; LABEL (e.g. the flags that
made the file) goes in the second column. Bytes are sent bytes per step summed over ranks,
collectives are per step on one rank, memory is per rank; the last columns are the measured /
predicted ratios the run itself wrote (residuals.ratio). --time adds the median step and MFU.

--psi writes the ZeRO++ claim's table instead: inter-node bytes also in the paper's units of
Ψ = the model's padded parameters, one unit being what one ring collective of Ψ bf16 elements
sends across nodes, summed over ranks: M·(N−1)/N·Ψ·2 bytes (M nodes, N ranks: the M ring hops
that leave a node each carry (N−1)/N of the buffer); with the secondary partitions and comm
buffers at the peak and the last step's loss.
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


def psi_row(doc, result, label):
    per_step = result["comm"]["per_step"]
    memory = result["memory"]
    config = doc["config"]
    nodes, world = config["num_nodes"], config["world_size"]
    unit = nodes * (world - 1) / world * result["padded_params"] * 2
    at_peak = memory["breakdown_at_peak"]
    cells = [label, f"{per_step['sent_bytes_intra'] / MIB:.1f}",
             f"{per_step['sent_bytes_inter'] / MIB:.1f}",
             f"{per_step['sent_bytes_inter'] / unit:.3f}" if nodes > 1 else "–",
             collectives(result), f"{memory['peak_bytes_per_rank'] / MIB:.1f}",
             f"{at_peak.get('secondary_params', 0) / MIB:.1f}",
             f"{at_peak.get('comm_buffers', 0) / MIB:.1f}", f"{result['loss'][-1]:.4f}"]
    return "| " + " | ".join(cells) + " |"


PSI_HEADER = ["| zero3 | intra MiB/step | inter MiB/step | inter in Ψ | collectives/step (kind/group) "
              "| peak MiB/rank | secondary MiB at peak | comm buffers MiB at peak | last loss |",
              "|---|---:|---:|---:|---|---:|---:|---:|---:|"]


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
    parser.add_argument("--psi", action="store_true", help="the ZeRO++ claim's table (Ψ units)")
    args = parser.parse_args(argv)
    lines = PSI_HEADER if args.psi else header(args.time)
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
            if result.get("status") == "ok" and args.psi:
                lines.append(psi_row(doc, result, label or "default"))
            elif result.get("status") == "ok":
                lines.append(row(result, label or "default", args.time))
            else:
                lines.append(f"| `{result.get('strategy')}` | {label or 'default'} | "
                             f"{result.get('status')}: {result.get('error', '')} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
