#!/usr/bin/python3
# The knob and mode table of the property sweep (tests/cli/test_sweep.py), declared once.
# Strategies are not listed here: the sweep asks the binary for its registry. To point the sweep
# at another options table, give it the same three names: MODES, KNOBS and SHAPES.
#
# A value is a list of arguments; "{G}" is replaced by the case's ranks per node. A knob's
# values may differ per subcommand; None = the flag absent.
import os

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DS = os.path.join(HERE, "ds_configs")
FS = os.path.join(HERE, "fsdp_configs")


def _files(folder):
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".json"))


# Where the model comes from. predict: bare counts (below 1, around 2^31, at the flag's top),
# presets, GPT-3 aliases, odd L,C,H,T,V specs, Llama; run: shapes that train in milliseconds.
MODES = {
    "predict": [["--params", "7.5e9"], ["--params", "17"], ["--params", "2147483649"],
                ["--params", "1e15"], ["--model", "tiny"], ["--model", "gpt2-1.5b"],
                ["--model", "gpt3-175b"], ["--model", "2,25,5,16,59"], ["--model", "1,1,1,1,2"],
                ["--model", "3,24,6,8,33", "--arch", "llama"], ["--model", "llama-tiny-pad"],
                ["--model", "llama2-70b"]],
    "run": [["--model", "tiny"], ["--model", "2,25,5,16,59"], ["--model", "llama-tiny-pad"],
            ["--model", "1,8,2,4,11"]],
}

P, R, BOTH = {"predict"}, {"run"}, {"predict", "run"}


def knob(flag, values, where=BOTH):
    """values: a list (the same for every subcommand) or {subcommand: list}; None = absent."""
    per = values if isinstance(values, dict) else {s: values for s in where}
    return {"flag": flag, "values": per}


SWITCH = [None, []]  # a bare switch: absent or given
ON_OFF = ["on", "off"]
KNOBS = [
    knob("--precision", ["fp32", "bf16-mixed"]),
    knob("--batch", ["1", "3"]),
    knob("--seq", ["0", "7"]),
    knob("--grad-accum", ["1", "2", "3"]),
    knob("--activation-checkpointing", ["none", "block", "every-2", "op"]),
    knob("--cross-entropy", ["full", "chunked"]),
    knob("--attention", ["naive", "fused"]),
    knob("--wrap", ["block", "model", "every-2"]),
    knob("--overlap", ON_OFF),
    knob("--bucket-mb", ["0.0001", "1", "25"]),
    knob("--backward-prefetch", ["none", "pre", "post"]),
    knob("--forward-prefetch", SWITCH),
    knob("--untied-head", SWITCH),
    knob("--zero-schedule", ["shipped", "paper"]),
    knob("--zero-bucket-reduce", ["all_reduce", "reduce_per_owner"]),
    knob("--persist-elements", ["0", "100", "100000"]),
    knob("--prefetch-elements", ["1", "1000", "50000000"]),
    knob("--max-live-elements", ["0", "5000", "1000000000"]),
    knob("--model-persist-elements", ["0", "300"]),
    knob("--fsdp2-prefetch", ["0", "1", "2"]),
    knob("--fsdp2-reshard-after-forward", ["auto", "true", "false", "{G}"]),
    knob("--fsdp2-reduce-dtype", ["auto", "fp32"]),
    knob("--fsdp2-mixed-precision", [None, "torchtitan"]),
    knob("--mics-schedule", ["shipped", "per-unit"]),
    knob("--mics-shard-size", ["0", "1", "2", "3"]),
    knob("--mics-hierarchical-params-gather", ON_OFF),
    knob("--zero-hpz-partition-size", ["1", "{G}"]),
    knob("--zero-quantized-weights", ON_OFF),
    knob("--zero-quantized-gradients", ON_OFF),
    knob("--zero-communication-data-type", [None, "fp16"]),
    knob("--zero-qgz-variant", ["shipped", "suite"]),
    knob("--zero-contiguous-gradients", ON_OFF),
    knob("--ds-config", _files(DS)),
    knob("--mem-limit-gb", ["0", "0.001", "1000"]),
    knob("--cluster", ["dgx-h100", "cpu-local", "h200", "dgx-a100-80g",
                       os.path.join(REPO, "bench", "clusters", "dgx-h100-100g.json")], P),
    knob("--fsdp-config", _files(FS)),
    knob("--ddp-config", [f for f in _files(HERE) if "ddp_config" in f]),
    knob("--collectives", ["ring", "mpi"], R),
    knob("--limit-all-gathers", ON_OFF),
    knob("--fsdp-no-sync", ON_OFF),
    knob("--fsdp-use-orig-params", ON_OFF),
]

# World shapes: (world, ranks per node); 0 = the cluster's (predict) or MPI's (run). Worlds
# 1..17 with nodes that do and do not divide them (the latter a refusal, exit 2).
SHAPES = {
    "predict": [(w, g) for w in range(1, 18) for g in sorted({0, 1, w, 2, 3, 4, 8})],
    "run": [(1, 0), (2, 1), (2, 2), (3, 1), (3, 3), (3, 2), (4, 2)],
}
