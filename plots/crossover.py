#!/usr/bin/python3
"""Step time against the inter-node bandwidth, measured and predicted (the network sweep).

usage: plots/crossover.py PATH... [--out plots/out/crossover.png] [--json FILE]

PATH: results files of `shardbench run --hosts netns` (or directories of them, e.g. the --out
of `ci/matrix.py ci/matrix/network.toml`). Each strategy is one colour: its measured median
step times as points, the run's embedded predictions (same network: the measured link is the
prediction's inter link) as a line with crosses through the same bandwidths. x is the rate
asked of the link (the sweep's axis; the measured rate of each run is in the table and in
topology.achieved_gbps), the unshaped runs at the rate their veth measured. zero3 with
hpZ + qwZ + qgZ is its own series ("zero3+zpp"); under --zero-schedule paper both get "/paper". Prints one row per (series, run) and the
pairs the published results are about (hybrid vs full sharding, ZeRO++ vs zero3, MiCS vs
zero3): at each bandwidth, measured and predicted speed-up of the first over the second.
--json writes the rows and pairs. Exit 2 when no file has a topology.
"""
import argparse
import json
import sys
from pathlib import Path

PAIRS = [("zero3+zpp", "zero3"), ("zero3+zpp/paper", "zero3/paper"),
         ("fsdp_hybrid_shard", "fsdp_full_shard"),
         ("fsdp2_hsdp", "fsdp_full_shard"), ("mics", "zero3")]


def series_name(result, config):
    s = result["strategy"]
    if s != "zero3":
        return s
    if (config.get("zero_hpz_partition_size", 1) > 1 and config.get("zero_quantized_weights")
            and config.get("zero_quantized_gradients")):
        s = "zero3+zpp"
    # --zero-schedule paper: per-tensor gathers, repeated in backward (the ZeRO++ paper's)
    return s + "/paper" if config.get("zero3_fetch") == "per_tensor" else s


def files_of(paths):
    for p in map(Path, paths):
        if p.is_dir():
            yield from sorted(q for q in p.glob("*.json") if q.name != "index.json")
        else:
            yield p


def load_rows(paths):
    """One row per ok result of a --hosts netns run: series, rates, measured and predicted."""
    rows = []
    for path in files_of(paths):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        topo = doc.get("topology") if isinstance(doc, dict) else None
        if not topo:
            continue
        shaping = topo.get("shaping") or {}
        for r in doc.get("results", []):
            if r.get("status") != "ok" or "prediction" not in r:
                continue
            ps = r["comm"]["per_step"]
            # the link's bytes less the loop's own reductions and the modelled headers/protocol
            payload = (ps["link_bytes_measured"] - ps["link_harness_bytes_measured"]
                       - ps["link_overhead_model_bytes"]) if "link_bytes_measured" in ps else None
            rows.append({
                "series": series_name(r, doc["config"]),
                "file": str(path),
                "requested_gbps": shaping.get("requested_gbps"),
                "achieved_gbps": topo["achieved_gbps"],
                "rate_to_requested": topo.get("rate_to_requested"),
                "measured_s": r["step_time_s"]["median"],
                "predicted_s": r["prediction"]["step_time_s"]["predicted"],
                # the communication alone: the comm thread's busy time, the predicted comm time
                "measured_comm_s": r.get("phases", {}).get("median", {}).get("comm_busy_s"),
                "predicted_comm_s": r["prediction"]["step_time_s"].get("comm"),
                "link_payload_bytes": payload,
                "ledger_inter_bytes": ps.get("sent_bytes_inter"),
            })
    return rows


def rate_order(requested_gbps):
    """Sort key of a requested rate: ascending, unshaped (None) last. Not the measured rate: an
    unshaped veth can measure below a high shaped one."""
    return (requested_gbps is None, requested_gbps or 0)


def pair_rows(rows):
    """Speed-ups of each PAIRS challenger over its baseline at every requested rate."""
    by = {(r["series"], r["requested_gbps"]): r for r in rows}
    out = []
    for a, b in PAIRS:
        for (s, rate), ra in sorted(by.items(), key=lambda kv: rate_order(kv[0][1])):
            rb = by.get((b, rate))
            if s != a or rb is None:
                continue
            out.append({"faster": a, "than": b, "requested_gbps": rate,
                        "measured_speedup": rb["measured_s"] / ra["measured_s"],
                        "predicted_speedup": rb["predicted_s"] / ra["predicted_s"]})
    return out


def ratio(a, b):
    return a / b if a is not None and b else float("nan")


def x_of(row):
    return row["requested_gbps"] or row["achieved_gbps"]


def plot(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5.5))
    names = sorted({r["series"] for r in rows})
    cmap = plt.get_cmap("tab10")
    for i, name in enumerate(names):
        pts = sorted((r for r in rows if r["series"] == name), key=x_of)
        x = [x_of(r) for r in pts]
        colour = cmap(i % 10)
        shaped = [r for r in pts if r["requested_gbps"]]
        ax.plot([x_of(r) for r in shaped], [r["measured_s"] for r in shaped], "o", color=colour,
                label=f"{name}")
        unshaped = [r for r in pts if not r["requested_gbps"]]
        ax.plot([x_of(r) for r in unshaped], [r["measured_s"] for r in unshaped], "s",
                color=colour, mfc="none")
        ax.plot(x, [r["predicted_s"] for r in pts], "x-", color=colour, alpha=0.7)
    ax.plot([], [], "ko", label="measured (median)")
    ax.plot([], [], "ks", mfc="none", label="measured, unshaped")
    ax.plot([], [], "kx-", label="predicted (embedded)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("inter-node link rate asked of tbf (Gb/s; unshaped: the veth's measured rate)")
    ax.set_ylabel("step time (s, median)")
    ax.set_title("Step time vs inter-node bandwidth: points measured, lines predicted")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "out" / "crossover.png"))
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows = load_rows(args.paths)
    if not rows:
        print("crossover: no results of a --hosts netns run (with a topology) in "
              + " ".join(args.paths), file=sys.stderr)
        return 2
    rows.sort(key=lambda r: (r["series"], rate_order(r["requested_gbps"]), r["achieved_gbps"]))
    print(f"{'series':22} {'req Gb/s':>8} {'got Gb/s':>8} {'measured s':>10} {'predicted s':>11}"
          f" {'meas/pred':>9} {'comm meas/pred':>14} {'link payload/ledger':>19}")
    for r in rows:
        lb, lg = r["link_payload_bytes"], r["ledger_inter_bytes"]
        print(f"{r['series']:22} {r['requested_gbps'] or 'unshaped':>8} {r['achieved_gbps']:8.3f}"
              f" {r['measured_s']:10.4f} {r['predicted_s']:11.4f}"
              f" {r['measured_s'] / r['predicted_s']:9.2f}"
              f" {ratio(r['measured_comm_s'], r['predicted_comm_s']):14.2f}"
              f" {lb / lg if lb and lg else float('nan'):19.4f}")
    pairs = pair_rows(rows)
    for p in pairs:
        print(f"{p['faster']} vs {p['than']} at {p['requested_gbps'] or 'unshaped'} Gb/s: "
              f"measured {p['measured_speedup']:.2f}x, predicted {p['predicted_speedup']:.2f}x")
    plot(rows, Path(args.out))
    print(f"plot: {args.out}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "pairs": pairs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
