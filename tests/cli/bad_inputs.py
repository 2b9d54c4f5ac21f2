#!/usr/bin/python3
# The bad inputs the suite must reject with one line naming the flag and exit code 2, and
# nothing written. Imported by test_cli.py; run directly it prints the table of docs/bad-input.md:
#   tests/cli/bad_inputs.py BUILD_DIR
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ds_configs")
FS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fsdp_configs")

# (arguments after `shardbench`, text the message must contain)
CASES = [
    (["run", "--model", "huge"], "--model"),
    (["run", "--model", "2,30,4,16,64"], "heads"),
    (["run", "--model", "0,32,4,16,64"], "layers"),
    (["run", "--model", "2,32,4,16"], "--model"),
    (["run", "--model", "a,b,c,d,e"], "not an integer"),
    (["run", "--model", "tiny", "--strategies", "zero4"], "--strategies"),
    (["run", "--model", "tiny", "--strategies", "ddp,,zero1"], "--strategies"),
    (["run", "--model", "tiny", "--precision", "fp16"], "--precision"),
    (["run", "--model", "tiny", "--attention", "flash"], "--attention"),
    (["run", "--model", "tiny", "--activation-checkpointing", "every-3"], "--activation-checkpointing"),
    (["run", "--model", "tiny", "--activation-checkpointing", "selective"], "--activation-checkpointing"),
    (["run", "--model", "tiny", "--arch", "bert"], "--arch"),
    (["run", "--model", "llama2-7b", "--arch", "gpt2"], "--arch"),
    (["run", "--model", "2,36,4,16,64", "--arch", "llama"], "--model"),
    (["run", "--model", "tiny", "--wrap", "every-0"], "--wrap"),
    (["run", "--model", "tiny", "--wrap", "layer"], "--wrap"),
    (["run", "--model", "tiny", "--overlap", "maybe"], "--overlap"),
    (["run", "--model", "tiny", "--collectives", "tree"], "--collectives"),
    (["run", "--model", "tiny", "--limit-all-gathers", "2"], "--limit-all-gathers"),
    (["run", "--model", "tiny", "--backward-prefetch", "later"], "--backward-prefetch"),
    (["run", "--model", "tiny", "--batch", "0"], "--batch"),
    (["run", "--model", "tiny", "--batch", "abc"], "--batch"),
    (["run", "--model", "tiny", "--steps", "-1"], "--steps"),
    (["run", "--model", "tiny", "--warmup", "-2"], "--warmup"),
    (["run", "--model", "tiny", "--bucket-mb", "0"], "--bucket-mb"),
    (["run", "--model", "tiny", "--grad-accum", "0"], "--grad-accum"),
    (["run", "--model", "tiny", "--ddp-config", "/nonexistent/ddp.json"], "--ddp-config"),
    (["run", "--model", "tiny", "--ddp-config", os.path.join(HERE, "ddp_config_unknown_key.json")],
     "unknown key gradient_as_bucket_veiw"),
    (["run", "--model", "tiny", "--ddp-config", os.path.join(HERE, "ddp_config_bad_value.json")],
     "key bucket_cap_mb"),
    (["run", "--model", "tiny", "--mem-limit-gb", "-1"], "--mem-limit-gb"),
    (["run", "--model", "tiny", "--timeout-s", "0"], "--timeout-s"),
    (["run", "--model", "tiny", "--lr", "0"], "--lr"),
    (["run", "--model", "tiny", "--prefetch-elements", "0"], "--prefetch-elements"),
    (["run", "--model", "tiny", "--device", "tpu"], "--device"),
    (["run", "--model", "tiny", "--np", "3", "--ranks-per-node", "2"], "--ranks-per-node"),
    (["run", "--model", "tiny", "--inject-fault", "1:x:boom"], "--inject-fault"),
    (["run", "--model", "tiny", "--fsdp2-reshard-after-forward", "maybe"],
     "--fsdp2-reshard-after-forward"),
    (["run", "--model", "tiny", "--np", "4", "--ranks-per-node", "4",
      "--fsdp2-reshard-after-forward", "3"], "--fsdp2-reshard-after-forward"),
    (["run", "--model", "tiny", "--fsdp2-prefetch", "-1"], "--fsdp2-prefetch"),
    (["run", "--model", "tiny", "--np", "4", "--mics-shard-size", "3"], "--mics-shard-size"),
    (["run", "--model", "tiny", "--mics-shard-size", "-2"], "--mics-shard-size"),
    (["run", "--model", "tiny", "--np", "4", "--ranks-per-node", "2", "--mics-shard-size", "2",
      "--mics-hierarchical-params-gather", "on"], "--mics-hierarchical-params-gather"),
    (["run", "--model", "tiny", "--seq", "17"], "context"),
    (["run", "--model", "tiny", "--seq", "-3"], "--seq"),
    (["run", "--model", "tiny", "--bogus-flag"], "bogus"),
    # signed values for unsigned flags, counts, duplicates, absurd limits
    (["run", "--model", "tiny", "--seed", "-1"], "--seed"),
    (["run", "--model", "tiny", "--prefetch-elements", "-1"], "--prefetch-elements"),
    (["run", "--model", "tiny", "--persist-elements", "1.5"], "--persist-elements"),
    (["run", "--model", "tiny", "--max-live-elements", "-1"], "--max-live-elements"),
    (["run", "--model", "tiny", "--model-persist-elements", "1.5"], "--model-persist-elements"),
    (["run", "--model", "tiny", "--np", "0"], "--np"),
    (["run", "--model", "tiny", "--strategies", "ddp,ddp,zero1"], "listed twice"),
    (["run", "--model", "tiny", "--timeout-s", "0.000001"], "--timeout-s"),
    (["run", "--model", "tiny", "--seed", "0x10"], "--seed"),
    (["run", "--model", "tiny", "--peak-gflops", "inf"], "--peak-gflops"),
    # output paths, checked before the first strategy (and before mpirun starts)
    (["run", "--model", "tiny", "--out", "/tmp"], "is a directory"),
    (["run", "--model", "tiny", "--np", "2", "--out", "/tmp"], "is a directory"),
    (["run", "--model", "tiny", "--out", "/proc/sb.json"], "cannot create files in '/proc'"),
    (["run", "--model", "tiny", "--out", "/dev/null/r.json"], "cannot create directory"),
    (["run", "--model", "tiny", "--out", "/dev/null"], "not a regular file"),
    (["run", "--model", "tiny", "--trace", "/dev/null"], "--trace /dev/null: is not a directory"),
    (["run", "--model", "tiny", "--np", "2", "--trace", "/dev/null/t"], "--trace /dev/null/t"),
    (["run", "--model", "tiny", "--trace", "/proc/sbtrace"], "--trace /proc/sbtrace"),
    (["run", "--model", "tiny", "--zero-schedule", "ideal"], "--zero-schedule"),
    (["run", "--model", "tiny", "--zero-bucket-reduce", "reduce"],
     "--zero-bucket-reduce reduce: allowed all_reduce|reduce_per_owner"),
    (["run", "--model", "tiny", "--zero-bucket-reduce", "reduce_per_owner", "--zero-schedule",
      "paper"], "--zero-bucket-reduce reduce_per_owner: allowed with --zero-schedule shipped only"),
    (["run", "--model", "tiny", "--zero-bucket-reduce", "reduce_per_owner", "--ds-config",
      f"{DS}/zero2_shipped.json"], "--zero-bucket-reduce reduce_per_owner: not with --ds-config"),
    (["run", "--model", "tiny", "--ds-config", "/nonexistent/ds.json"], "cannot be read"),
    (["run", "--model", "tiny", "--ds-config", f"{DS}/bad_json.json"], "not valid JSON"),
    (["run", "--model", "tiny", "--ds-config", f"{DS}/bad_unknown_zero_key.json"],
     "zero_optimization.bogus_knob: unknown or unsupported key"),
    (["run", "--model", "tiny", "--ds-config", f"{DS}/bad_unknown_top_key.json"],
     "optimizer: unknown or unsupported key"),
    (["run", "--model", "tiny", "--ds-config", f"{DS}/bad_grad_accum.json"],
     "gradient_accumulation_steps: 0: allowed 1..4096"),
    (["run", "--model", "tiny", "--ds-config", f"{DS}/bad_stage.json"], "zero_optimization.stage"),
    (["run", "--model", "tiny", "--ds-config", f"{DS}/bad_fp16.json"], "fp16.enabled"),
    (["run", "--model", "tiny", "--ds-config", f"{DS}/bad_bucket.json"],
     "zero_optimization.reduce_bucket_size"),
    (["run", "--model", "tiny", "--ds-config", f"{DS}/zero2_shipped.json", "--strategies",
      "ddp,zero3"], "--strategies zero3"),
    (["run", "--model", "tiny", "--ds-config", f"{DS}/zero2_shipped.json", "--zero-schedule",
      "paper"], "--zero-schedule"),
    (["run", "--model", "tiny", "--fsdp-use-orig-params", "yes"], "--fsdp-use-orig-params"),
    (["run", "--model", "tiny", "--fsdp-config", "/nonexistent/fsdp.json"], "--fsdp-config"),
    (["run", "--model", "tiny", "--fsdp-config", f"{FS}/bad_unknown_key.json"],
     "unknown key limit_all_gather"),
    (["run", "--model", "tiny", "--fsdp-config", f"{FS}/bad_reduce_dtype.json"],
     "key mixed_precision.reduce_dtype"),
    (["run", "--model", "tiny", "--fsdp-config", f"{FS}/bad_no_shard.json"],
     "key sharding_strategy"),
    (["run", "--model", "tiny", "--fsdp-config", f"{FS}/bad_prefetch.json"],
     "key backward_prefetch"),
    (["run", "--model", "tiny", "--fsdp-config", f"{FS}/bad_cpu_offload.json"],
     "key cpu_offload"),
    (["run", "--model", "tiny", "--fsdp-config", f"{FS}/hybrid_bf16_post.json", "--strategies",
      "ddp,fsdp_full_shard"], "--strategies fsdp_full_shard"),
    (["predict", "--model", "tiny", "--zero-schedule", "ideal"], "--zero-schedule"),
    (["predict", "--model", "tiny", "--world", "4", "--ranks-per-node", "2",
      "--fsdp2-reshard-after-forward", "3"], "--fsdp2-reshard-after-forward 3"),
    (["predict", "--model", "tiny", "--zero-bucket-reduce", "none"], "--zero-bucket-reduce none"),
    (["predict", "--model", "tiny", "--grad-accum", "0"], "--grad-accum"),
    (["predict", "--model", "tiny", "--ds-config", f"{DS}/bad_unknown_zero_key.json"],
     "zero_optimization.bogus_knob: unknown or unsupported key"),
    (["predict", "--model", "tiny", "--ds-config", f"{DS}/zero2_shipped.json", "--strategies",
      "zero3"], "--strategies zero3"),
    (["run", "--model", "tiny", "--zero-hpz-partition-size", "0"], "--zero-hpz-partition-size"),
    (["run", "--model", "tiny", "--np", "4", "--ranks-per-node", "2",
      "--zero-hpz-partition-size", "4"], "--zero-hpz-partition-size 4"),
    (["run", "--model", "tiny", "--zero-quantized-weights", "yes"], "--zero-quantized-weights"),
    (["run", "--model", "tiny", "--zero-quantized-gradients", "yes"], "--zero-quantized-gradients"),
    (["run", "--model", "tiny", "--ds-config", f"{DS}/bad_qgz.json"],
     "zero_optimization.zero_quantized_gradients"),
    (["predict", "--model", "tiny", "--world", "4", "--ranks-per-node", "2",
      "--zero-hpz-partition-size", "4"], "--zero-hpz-partition-size 4"),
    (["run", "--model", "tiny", "--precision", "bf16-mixed", "--ds-config",
      f"{DS}/zero2_fp32_no_overlap.json"], "--precision bf16-mixed conflicts with --ds-config"),
    (["predict", "--model", "tiny", "--overlap", "on", "--ds-config",
      f"{DS}/zero2_fp32_no_overlap.json"], "--overlap on conflicts with --ds-config"),
    (["predict", "--model", "tiny", "--backward-prefetch", "pre", "--fsdp-config",
      f"{FS}/defaults.json"], "--backward-prefetch pre conflicts with --fsdp-config"),
    (["run", "--model", "tiny", "--precision", "bf16-mixed", "--strategies", "ddp,fsdp_full_shard",
      "--fsdp-config", f"{FS}/defaults.json"], "--precision bf16-mixed conflicts with --fsdp-config"),
    (["predict", "--model", "tiny", "--fsdp-config", f"{FS}/bad_unknown_key.json"], "--fsdp-config"),
    (["run", "--model", "tiny", "--batch", "4", "--ds-config", f"{DS}/zero2_micro_batch.json"],
     "--batch 4 conflicts with --ds-config"),
    (["run", "--model", "tiny", "--ranks-per-nodes", "2"], "did you mean --ranks-per-node?"),
    (["predict", "--strategies", "zero3,fsdp_ful_shard"], "did you mean fsdp_full_shard?"),
    (["predict", "--model", "gpt2-125m"], "did you mean gpt2-124m?"),
    (["run", "--model", "smal"], "did you mean small?"),
    (["predict", "--cluster", "dgx-h10"], "did you mean dgx-h100?"),
    (["predict", "--precision", "bf16"], "did you mean bf16-mixed?"),
    (["predcit"], "did you mean predict?"),
    ([], "missing command"),
    (["predict", "--zero-quantized-weights", "yes"], "--zero-quantized-weights yes: allowed on|off"),
    (["predict", "--fsdp2-reshard-after-forward", "-1"], "--fsdp2-reshard-after-forward -1"),
    (["predict", "--limit-all-gathers", "maybe"], "--limit-all-gathers maybe"),
    (["launch"], "launch"),
    (["export", "--format", "csv", "x.json"], "--format"),
    (["export", "--format", "bencher", "/nonexistent.json"], "cannot open"),
    (["export", "--format", "bencher", "x.json", "--out", "/tmp"], "--out /tmp: is a directory"),
    (["export", "--format", "bencher", "x.json", "--out", "/proc/sb.json"], "--out /proc/sb.json"),
    (["report", "/etc/hostname", "--out", "/tmp"], "--out /tmp: is a directory"),
    (["report", "/etc/hostname", "--out", "/proc/r.html"], "--out /proc/r.html"),
    (["predict", "--params", "-5"], "--params"),
    (["predict", "--params", "0"], "--params"),
    (["predict", "--model", "tiny", "--attention", "sdpa"], "--attention"),
    (["predict", "--model", "tiny", "--activation-checkpointing", "every-0"], "--activation-checkpointing"),
    (["predict", "--params", "1000000", "--activation-checkpointing", "block"], "--activation-checkpointing"),
    (["predict", "--model", "gpt3-6.7b", "--arch", "llama"], "--arch"),
    (["predict", "--params", "7.25"], "--params"),
    (["predict", "--model", "tiny", "--prefetch-elements", "-1"], "--prefetch-elements"),
    (["predict", "--model", "tiny", "--mem-limit-gb", "inf"], "--mem-limit-gb"),
    (["predict", "--model", "tiny", "--json", "/tmp"], "--json /tmp: is a directory"),
    (["predict", "--model", "tiny", "--json", "/proc/p.json"], "--json /proc/p.json"),
    (["export", "--format", "github-action-benchmark", "x.json"], "--tool is required"),
    (["export", "--format", "bencher", "--tool", "bigger", "x.json"], "--tool"),
]


def run_case(sb, args):
    out = os.path.join(tempfile.mkdtemp(prefix="sbbad"), "never.json")
    extra = ["--out", out] if args[:1] == ["run"] and "--out" not in args else []
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run([sb, *args, *extra], capture_output=True, text=True, timeout=60, env=env)
    return p, out


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    sb = os.path.join(build, "shardbench")
    print("| command | exit | message |")
    print("|---|---|---|")
    for args, _ in CASES:
        p, _ = run_case(sb, args)
        msg = (p.stderr.strip().splitlines() or [""])[0].replace("|", "\\|")
        line = f"| `shardbench {' '.join(args)}` | {p.returncode} | {msg} |"
        print(line.replace(REPO + os.sep, ""))  # fixture paths relative to the checkout


if __name__ == "__main__":
    main()
