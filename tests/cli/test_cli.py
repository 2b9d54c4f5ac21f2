#!/usr/bin/python3
# End-to-end tests of the `shardbench` command as a user runs it: the standalone --np launch,
# schema validation of a real run's output and of predictions, the atomic write killed inside
# the write, the results-file lock and the launcher's clean-up, the exporters' output shape,
# and one-line usage errors with exit code 2. Usage: test_cli.py BUILD_DIR
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bad_inputs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else os.path.join(ROOT, "build")
SB = os.path.join(BUILD, "shardbench")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1", OMPI_MCA_mpi_yield_when_idle="1")


def sb(*args, timeout=300):
    return subprocess.run([SB, *args], env=ENV, capture_output=True, text=True, timeout=timeout)


def registered_strategies():
    """Every strategy the binary registers, from its one-line refusal of an unknown name."""
    out = os.path.join(tempfile.mkdtemp(prefix="sbnames"), "never.json")
    p = sb("run", "--model", "tiny", "--strategies", "no-such-strategy", "--out", out)
    return p.stderr.strip().split("allowed: all or ")[1].split(",")


def load(path):
    with open(path) as f:
        return json.load(f)


def validate(path):
    return subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "results", "validate.py"), path],
                          capture_output=True, text=True)


class RunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sbcli")
        cls.out = os.path.join(cls.tmp, "run.json")
        # Standalone launch: no mpirun on the command line; shardbench starts the MPI job.
        cls.proc = sb("run", "--np", "4", "--ranks-per-node", "2", "--model", "tiny",
                      "--strategies", "all", "--steps", "2", "--warmup", "1", "--out", cls.out)

    def test_standalone_np_launch_runs_every_strategy(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        doc = load(self.out)
        self.assertEqual(doc["config"]["world_size"], 4)
        self.assertEqual(doc["config"]["num_nodes"], 2)
        self.assertEqual([r["status"] for r in doc["results"]], ["ok"] * len(registered_strategies()))
        self.assertIn("fsdp_hybrid_shard", self.proc.stdout)  # the table
        n = len(registered_strategies())
        self.assertIn(f"[{n}/{n}] {registered_strategies()[-1]}", self.proc.stdout)  # progress

    def test_output_validates_against_schema(self):
        v = validate(self.out)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    def test_cpu_run_says_fp32_matmuls_and_has_no_device_memory(self):
        # The CPU device has no bf16 matmul: fp32 even for bf16-mixed; no GPU memory figures.
        out = os.path.join(self.tmp, "bf16.json")
        p = sb("run", "--model", "tiny", "--strategies", "ddp", "--precision", "bf16-mixed",
               "--steps", "1", "--warmup", "0", "--out", out, "--quiet")
        self.assertEqual(p.returncode, 0, p.stderr)
        # --quiet drops the progress lines only: the table and the file's path remain
        self.assertNotIn("[1/1]", p.stdout)
        self.assertNotIn("shardbench: tiny", p.stdout)
        self.assertRegex(p.stdout, r"strategy\s+tokens/s")
        self.assertRegex(p.stdout, r"\nddp\s+\d+")
        self.assertIn("results: " + out, p.stdout)
        for doc in (load(self.out), load(out)):
            self.assertEqual(doc["config"]["matmul_precision"], "fp32")
            for r in doc["results"]:
                self.assertIsNone(r["memory"]["device"])

    def test_llama_block_runs_end_to_end_and_is_recorded(self):
        # --arch llama on a spec: the JSON names the block and its shape, the FLOP formula is
        # the Llama one, every strategy trains the same model (same losses), and the file
        # validates; the run's own prediction agrees on bytes and model state.
        out = os.path.join(self.tmp, "llama.json")
        p = sb("run", "--np", "2", "--model", "2,32,4,16,64", "--arch", "llama",
               "--strategies", "ddp,zero3,fsdp_full_shard", "--steps", "2", "--warmup", "1",
               "--peak-gflops", "50", "--out", out, "--quiet")
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = load(out)
        m = doc["config"]["model"]
        self.assertEqual((m["arch"], m["n_kv_head"], m["ffn_hidden"], m["tied_head"]),
                         ("llama", 4, 256, False))
        losses = [r["loss"] for r in doc["results"]]
        for r in doc["results"]:
            self.assertEqual(r["status"], "ok", r.get("error"))
            self.assertIn("KV", r["throughput"]["flop_formula"])
            for k in ("model_state_params", "payload_bytes", "sent_bytes_intra"):
                self.assertEqual(r["residuals"]["ratio"][k], 1.0, k)
            for a, b in zip(r["loss"], losses[0]):
                self.assertAlmostEqual(a, b, delta=1e-4 * abs(b))
        v = validate(out)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    def test_prediction_of_bytes_and_model_state_is_exact(self):
        # The predictor replays the same strategy rules: on a real run its bytes and model-state
        # memory must equal the measurement exactly (ratio 1, residual 0), for every strategy.
        doc = load(self.out)
        for r in doc["results"]:
            self.assertEqual(r["prediction"]["status"], "predicted", r["strategy"])
            for k in ("model_state_params", "model_state_grads", "model_state_optimizer",
                      "payload_bytes", "sent_bytes_intra", "sent_bytes_inter"):
                with self.subTest(strategy=r["strategy"], quantity=k):
                    self.assertEqual(r["residuals"]["ratio"][k], 1.0)
                    self.assertEqual(r["residuals"]["residual"][k], 0)
            self.assertGreater(r["residuals"]["ratio"]["step_time_s"], 0)

    def test_embedded_prediction_uses_this_runs_calibration(self):
        # Not the cpu-local preset fitted on one machine: the cluster is built from the run's
        # own sgemm and triad and the physical cores it counted, and the file records it.
        doc = load(self.out)
        cl, peak = doc["prediction_cluster"], doc["config"]["mfu_peak"]
        self.assertEqual(cl["name"], "cpu-calibrated")
        self.assertEqual(cl["peak_flops_fp32"], peak["per_device_flops"])
        self.assertGreater(peak["mem_bw_bytes_per_s"], 0)
        self.assertEqual(cl["memory_bw_bytes_per_s"], peak["mem_bw_bytes_per_s"])
        # ZeRO++'s host quantiser, timed in the same process: its passes are never free
        for k in ("quantize_elems_per_s", "dequantize_elems_per_s",
                  "quantize_int4_elems_per_s", "dequantize_int4_sum_elems_per_s"):
            self.assertGreater(peak[k], 0, k)
            self.assertEqual(cl["kernels"][k], peak[k], k)
        # the step's own GEMM shapes, timed in the same process, set the GEMM rate; the
        # fused attention (not BLAS) keeps the sgemm's
        self.assertGreater(peak["gemm_mix_shapes"], 0)
        self.assertAlmostEqual(cl["kernels"]["gemm_ceiling"],
                               min(1.0, peak["gemm_mix_flops"] / peak["per_device_flops"]),
                               places=9)
        self.assertEqual(cl["kernels"]["flash_fwd"], 1.0)
        self.assertEqual(cl["kernels"]["flash_bwd"], 1.0)
        # the collectives' delay and shared-memory bandwidth, timed once MPI is up
        if doc["config"]["world_size"] > 1:
            self.assertIn("collective latency measured at start", cl["source"])
            self.assertGreaterEqual(cl["base_latency_s"], 0)
            self.assertGreaterEqual(cl["intra"]["latency_s"], 0)
            # the ranks' GEMMs all at once against alone: ranks sharing cores time-slice them,
            # so 4 ranks on 2 cores take at least about twice as long (never much less)
            basis = doc["results"][0]["throughput"]["peak_basis"]
            share = doc["config"]["world_size"] / basis["physical_cores"]
            self.assertEqual(cl["measured_world"], doc["config"]["world_size"])
            self.assertGreaterEqual(cl["measured_slowdown"], 0.75 * share)
            self.assertLess(cl["measured_slowdown"], 4 * max(1.0, share))
            # ranks outnumbering cores: the rings timed again beside a thread of sgemms, and
            # after a burst of them; a step's collectives beside compute wait for the scheduler
            beside = ("beside_compute_base_s", "beside_compute_step_s", "after_compute_sync_s")
            if share > 1:
                self.assertIn("beside a thread of sgemms on every rank", cl["source"])
                for k in beside:
                    self.assertGreaterEqual(cl[k], 0, k)
                self.assertGreater(cl["beside_compute_base_s"] + cl["beside_compute_step_s"], 0)
            else:
                for k in beside:
                    self.assertEqual(cl[k], 0, k)
        basis = doc["results"][0]["throughput"]["peak_basis"]
        self.assertEqual(cl["host_cores"], basis["physical_cores"])
        self.assertEqual(cl["ranks_per_node"], doc["config"]["ranks_per_node"])
        self.assertNotIn("prediction_cluster_note", doc)
        for r in doc["results"]:
            self.assertEqual(r["prediction"]["cluster"], "cpu-calibrated")

    def run_ds_config(self, name):
        """One tiny 2-rank step configured by tests/cli/ds_configs/NAME: (its path, out, doc)."""
        cfg = os.path.join(ROOT, "tests", "cli", "ds_configs", name)
        out = os.path.join(self.tmp, "ds-" + name)
        p = sb("run", "--np", "2", "--model", "tiny", "--ds-config", cfg, "--steps", "1",
               "--warmup", "0", "--out", out, "--quiet")
        self.assertEqual(p.returncode, 0, p.stderr)
        return cfg, out, load(out)

    def test_ds_config_configures_zero_as_deepspeed_would(self):
        # stage 2 selects zero2; bf16 -> bf16-mixed; reduce_bucket_size 5e8 elements of bf16;
        # keys accepted but not modelled are listed; the run is a valid results file.
        cfg, out, doc = self.run_ds_config("zero2_shipped.json")
        c = doc["config"]
        self.assertEqual([r["strategy"] for r in doc["results"]], ["zero2"])
        self.assertEqual(doc["results"][0]["status"], "ok")
        self.assertEqual(c["precision"], "bf16-mixed")
        self.assertEqual(c["zero_grad_reduce"], "bucket_all_reduce")
        self.assertFalse(c["overlap"])  # overlap_comm false (DeepSpeed's default for stage 2)
        self.assertEqual(c["bucket_mb"], 5e8 * 2 / 2**20)
        self.assertEqual(c["ds_config"], cfg)
        self.assertEqual(sorted(c["ds_config_ignored"]),
                         ["steps_per_print", "zero_optimization.contiguous_gradients"])
        v = validate(out)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    def test_ds_config_multi_rank_false_reduces_to_each_owner(self):
        # use_multi_rank_bucket_allreduce false: tiny is one bucket, so one reduce per owning
        # rank (2) and the all-gather; the flag --zero-bucket-reduce reduce_per_owner is the same
        # experiment, and predict with the file dry-runs the same collectives and bytes.
        cfg, out, doc = self.run_ds_config("zero2_reduce_per_owner.json")
        self.assertEqual(doc["config"]["zero_grad_reduce"], "reduce_per_owner")
        r = doc["results"][0]
        self.assertEqual((r["strategy"], r["status"]), ("zero2", "ok"), r.get("error"))
        self.assertEqual(r["comm"]["per_step"]["collectives"], 2 + 1)
        v = validate(out)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        flag_out = os.path.join(self.tmp, "flag-reduce-per-owner.json")
        p = sb("run", "--np", "2", "--model", "tiny", "--strategies", "zero2", "--zero-bucket-reduce",
               "reduce_per_owner", "--overlap", "off", "--steps", "1", "--warmup", "0", "--out",
               flag_out, "--quiet")
        self.assertEqual(p.returncode, 0, p.stderr)
        f = load(flag_out)
        self.assertEqual(f["config"]["zero_grad_reduce"], "reduce_per_owner")
        self.assertEqual(f["results"][0]["comm"]["per_step"], r["comm"]["per_step"])
        pred = os.path.join(self.tmp, "ds-predict-owner.json")
        p = sb("predict", "--model", "tiny", "--world", "2", "--ranks-per-node", "2",
               "--ds-config", cfg, "--json", pred)
        self.assertEqual(p.returncode, 0, p.stderr)
        pr = load(pred)["results"][0]["comm"]["per_step"]
        self.assertEqual(pr["collectives"], 2 + 1)
        self.assertEqual(pr["payload_bytes"], r["comm"]["per_step"]["payload_bytes"])

    def test_ds_config_gradient_accumulation_is_the_runs_grad_accum(self):
        # stage 1 with gradient_accumulation_steps 3: zero1 accumulates 3 micro-batches per step
        # and reduces once, at the boundary (one bucket all-reduce + one all-gather per step).
        _, _, doc = self.run_ds_config("zero1_grad_accum.json")
        self.assertEqual(doc["config"]["grad_accum"], 3)
        r = doc["results"][0]
        self.assertEqual((r["strategy"], r["status"]), ("zero1", "ok"), r.get("error"))
        self.assertEqual(r["comm"]["per_step"]["collectives"], 2)

    def run_fsdp_config(self, name, *extra):
        """One tiny 2-rank step configured by tests/cli/fsdp_configs/NAME: (its path, doc)."""
        cfg = os.path.join(ROOT, "tests", "cli", "fsdp_configs", name)
        out = os.path.join(self.tmp, "fsdp-" + name)
        p = sb("run", "--np", "2", "--ranks-per-node", "1", "--model", "tiny", "--fsdp-config",
               cfg, "--steps", "1", "--warmup", "0", "--out", out, "--quiet", *extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        v = validate(out)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        return cfg, load(out)

    def test_fsdp_config_configures_fsdp_as_pytorch_would(self):
        # HYBRID_SHARD selects fsdp_hybrid_shard; its knobs land in the run's config; keys
        # accepted but not modelled are listed as ignored.
        cfg, doc = self.run_fsdp_config("hybrid_bf16_post.json")
        c = doc["config"]
        self.assertEqual([r["strategy"] for r in doc["results"]], ["fsdp_hybrid_shard"])
        self.assertEqual(doc["results"][0]["status"], "ok", doc["results"][0].get("error"))
        self.assertEqual((c["precision"], c["backward_prefetch"], c["forward_prefetch"],
                          c["limit_all_gathers"], c["fsdp_use_orig_params"]),
                         ("bf16-mixed", "post", True, True, True))
        self.assertEqual(c["fsdp_config"], cfg)
        self.assertEqual(sorted(c["fsdp_config_ignored"]),
                         ["device_id", "mixed_precision.buffer_dtype", "sync_module_states"])

    def test_fsdp_config_defaults_are_fsdps_not_the_flags(self):
        # An empty file is FullyShardedDataParallel's defaults (torch 1.13.1): FULL_SHARD, no
        # backward prefetch, no rate limiter, fp32, whatever the flags said; other listed
        # strategies still run.
        _, doc = self.run_fsdp_config("defaults.json", "--strategies", "ddp,fsdp_full_shard")
        c = doc["config"]
        self.assertEqual([r["strategy"] for r in doc["results"]], ["ddp", "fsdp_full_shard"])
        self.assertEqual((c["precision"], c["backward_prefetch"], c["limit_all_gathers"],
                          c["fsdp_use_orig_params"], c["fsdp_config_ignored"]),
                         ("fp32", "none", False, False, []))
    def test_config_files_bind_to_their_strategies_in_predict(self):
        # --ds-config (fp32, no overlap) configures the zero2 row only: the fsdp_full_shard row
        # is identical to a prediction without the file; --fsdp-config likewise leaves zero2.
        ds = os.path.join(ROOT, "tests", "cli", "ds_configs", "zero2_fp32_no_overlap.json")
        fs = os.path.join(ROOT, "tests", "cli", "fsdp_configs", "defaults.json")
        base = ["predict", "--model", "gpt2-124m", "--world", "8", "--strategies",
                "zero2,fsdp_full_shard"]

        def rows(*extra):
            out = os.path.join(self.tmp, "bind-%d.json" % len(os.listdir(self.tmp)))
            p = sb(*base, *extra, "--json", out)
            self.assertEqual(p.returncode, 0, p.stderr)
            return {r["strategy"]: r for r in load(out)["results"]}, load(out), p
        plain, _, _ = rows()
        with_ds, doc, p = rows("--ds-config", ds)
        self.assertEqual(with_ds["fsdp_full_shard"], plain["fsdp_full_shard"])
        self.assertEqual((with_ds["zero2"]["settings"]["precision"],
                          with_ds["zero2"]["settings"]["overlap"]), ("fp32", False))
        self.assertEqual(plain["zero2"]["settings"]["precision"], "bf16-mixed")
        self.assertIn("precision", doc["config"]["rows_differ"])
        self.assertIn("warning: the rows ran at different precision", p.stderr)
        self.assertIn("rows differ in", p.stdout)
        with_fs, _, _ = rows("--fsdp-config", fs)
        self.assertEqual(with_fs["zero2"], plain["zero2"])
        # train_micro_batch_size_per_gpu is the DeepSpeed rows' --batch: zero2 at 2, fsdp at 1
        mb = os.path.join(ROOT, "tests", "cli", "ds_configs", "zero2_micro_batch.json")
        with_mb, doc, p = rows("--ds-config", mb)
        self.assertEqual(with_mb["fsdp_full_shard"], plain["fsdp_full_shard"])
        self.assertEqual(with_mb["zero2"]["settings"]["batch_per_rank"], 2)
        self.assertIn("batch_per_rank", doc["config"]["rows_differ"])
        self.assertIn("different batch_per_rank", p.stderr)
        self.assertEqual(with_fs["fsdp_full_shard"]["settings"]["precision"], "fp32")

    def test_config_files_bind_to_their_strategies_in_run(self):
        # The same for a real run (fp32, the flags' default and the file's): the file's
        # overlap_comm false and 5e8-element bucket stay on zero2; the fsdp_full_shard row's
        # exact figures (bytes, collectives, memory, parameters) are those of a run without it.
        ds = os.path.join(ROOT, "tests", "cli", "ds_configs", "zero2_fp32_no_overlap.json")

        def rows(*extra):
            out = os.path.join(self.tmp, "bindrun-%d.json" % len(os.listdir(self.tmp)))
            p = sb("run", "--np", "2", "--model", "tiny", "--strategies", "zero2,fsdp_full_shard",
                   "--steps", "1", "--warmup", "0", "--out", out,
                   "--quiet", *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            return {r["strategy"]: r for r in load(out)["results"]}, p
        plain, _ = rows()
        with_ds, p = rows("--ds-config", ds)
        a, b = with_ds["fsdp_full_shard"], plain["fsdp_full_shard"]
        self.assertEqual(a["comm"]["per_step"], b["comm"]["per_step"])
        self.assertEqual(a["memory"]["peak_bytes_per_rank"], b["memory"]["peak_bytes_per_rank"])
        for k in ("param_checksum", "settings", "padded_params"):
            self.assertEqual(a[k], b[k], k)
        self.assertEqual((a["settings"]["overlap"], a["settings"]["bucket_mb"]), (True, 25))
        self.assertEqual(with_ds["zero2"]["settings"]["overlap"], False)
        self.assertEqual(with_ds["zero2"]["settings"]["configured_by"], "--ds-config " + ds)

    def test_ds_config_zero2_accumulation_reduces_every_micro_batch(self):
        # stage 2 with gradient_accumulation_steps 3 (tiny is one 5e8-element bucket): the
        # bucket all-reduce on each of the 3 micro-batches, then one all-gather; `predict` with
        # the same file dry-runs the same schedule.
        cfg, _, doc = self.run_ds_config("zero2_grad_accum.json")
        self.assertEqual(doc["config"]["grad_accum"], 3)
        r = doc["results"][0]
        self.assertEqual((r["strategy"], r["status"]), ("zero2", "ok"), r.get("error"))
        self.assertEqual(r["comm"]["per_step"]["collectives"], 3 + 1)
        pred = os.path.join(self.tmp, "ds-predict.json")
        p = sb("predict", "--model", "tiny", "--world", "2", "--ranks-per-node", "2",
               "--ds-config", cfg, "--json", pred)
        self.assertEqual(p.returncode, 0, p.stderr)
        pd = load(pred)
        self.assertEqual(pd["config"]["grad_accum"], 3)
        self.assertEqual([x["strategy"] for x in pd["results"]], ["zero2"])
        self.assertEqual(pd["results"][0]["comm"]["per_step"]["collectives"], 3 + 1)
        self.assertEqual(pd["results"][0]["comm"]["per_step"]["payload_bytes"],
                         r["comm"]["per_step"]["payload_bytes"])
    def test_ds_config_zeropp_keys_configure_zero3(self):
        # zero_hpz_partition_size (the node of 2), zero_quantized_weights and
        # zero_quantized_gradients select and configure zero3 and are recorded in the result's
        # config; on 2 nodes of 2, qgZ's all-to-alls run inside the node and across nodes.
        cfg = os.path.join(ROOT, "tests", "cli", "ds_configs", "zero3_zeropp.json")
        out = os.path.join(self.tmp, "ds-zeropp.json")
        p = sb("run", "--np", "4", "--ranks-per-node", "2", "--model", "tiny", "--ds-config", cfg,
               "--steps", "1", "--warmup", "0", "--out", out, "--quiet")
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = load(out)
        c = doc["config"]
        self.assertEqual((c["zero_hpz_partition_size"], c["zero_quantized_weights"],
                          c["zero_quantized_gradients"]), (2, True, True))
        r = doc["results"][0]
        self.assertEqual((r["strategy"], r["status"]), ("zero3", "ok"), r.get("error"))
        a2a = {k["group"] for k in r["comm"]["by_kind"] if k["kind"] == "all_to_all"}
        self.assertEqual(a2a, {"intra", "inter"})

    def test_strategies_agree_on_the_parameters(self):
        doc = load(self.out)
        sums = [r["param_checksum"] for r in doc["results"]]
        for s in sums:
            self.assertAlmostEqual(s, sums[0], delta=1e-5 * abs(sums[0]))

    def export(self, fmt, *files, tool=None):
        args = ["export", "--format", fmt, *files] + (["--tool", tool] if tool else [])
        p = sb(*args)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def variant(self):
        """The run's file with two knobs off their defaults and one strategy that ran out of
        memory (as a real oom is recorded: status and error only)."""
        doc = load(self.out)
        doc["config"]["bucket_mb"] = 10
        doc["config"]["overlap"] = False
        doc["results"][3] = {"strategy": "zero3", "status": "oom", "error": "rank 1: out of memory"}
        path = os.path.join(self.tmp, "variant.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    def test_export_bencher_shape(self):
        bmf = self.export("bencher", self.out)
        self.assertEqual(sorted(bmf), sorted(f"tiny/w4n2/fp32/{s}" for s in registered_strategies()))
        for bench, measures in bmf.items():
            self.assertEqual(measures["status"]["value"], 0)
            for m in ("step_time_s", "tokens_per_s", "mfu", "peak_bytes_per_rank",
                      "sent_bytes_inter"):
                v = measures[m]
                self.assertLessEqual(v["lower_value"], v["value"], (bench, m))
                self.assertLessEqual(v["value"], v["upper_value"], (bench, m))
            # the step time's bounds are the CI of the median: order statistics of the samples
            st = measures["step_time_s"]
            samples = sorted(next(r for r in load(self.out)["results"]
                                  if bench.endswith("/" + r["strategy"]))["step_time_s"]["samples"])
            self.assertEqual([st["lower_value"], st["upper_value"]], [samples[0], samples[-1]])
            self.assertEqual(measures["sent_bytes_inter"]["lower_value"],
                             measures["sent_bytes_inter"]["value"])

    def test_export_names_carry_knobs_and_keep_failed_strategies(self):
        bmf = self.export("bencher", self.out, self.variant())
        # two series per strategy: the knobs tell them apart
        self.assertEqual(len(bmf), 2 * len(registered_strategies()))
        oom = bmf["tiny/w4n2/fp32/bucket_mb=10,overlap=false/zero3"]
        self.assertEqual(oom, {"status": {"value": 1, "lower_value": 1, "upper_value": 1}})
        gb = self.export("gbench", self.variant())
        z3 = next(b for b in gb["benchmarks"] if b["name"].endswith("/zero3"))
        self.assertTrue(z3["error_occurred"])
        self.assertIn("out of memory", z3["error_message"])

    def test_activation_checkpointing_names_its_series_and_is_another_experiment(self):
        doc = load(self.out)
        self.assertEqual(doc["config"]["model"]["activation_checkpointing"], "none")
        self.assertIn("hfu", doc["results"][0]["throughput"])
        doc["config"]["model"]["activation_checkpointing"] = "every-2"
        ac = os.path.join(self.tmp, "ac.json")
        with open(ac, "w") as f:
            json.dump(doc, f)
        self.assertIn("tiny/w4n2/fp32/activation_checkpointing=every-2/ddp",
                      self.export("bencher", ac))
        compare = os.path.join(ROOT, "plots", "compare.py")
        p = subprocess.run(["/usr/bin/python3", compare, self.out, ac], capture_output=True,
                           text=True)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("activation_checkpointing", p.stderr)
        # a file from before the knob ran without it: the same experiment as "none"
        del doc["config"]["model"]["activation_checkpointing"]
        with open(ac, "w") as f:
            json.dump(doc, f)
        p = subprocess.run(["/usr/bin/python3", compare, self.out, ac], capture_output=True,
                           text=True)
        self.assertNotIn("different experiments", p.stderr)

    def test_export_github_action_benchmark_one_tool_per_file(self):
        names = {}
        for tool in ("bigger", "smaller"):
            gab = self.export("github-action-benchmark", self.out, self.variant(), tool=tool)
            self.assertIsInstance(gab, list)
            for e in gab:
                self.assertLessEqual(set(e), {"name", "unit", "value", "range", "extra"})
            names[tool] = {e["name"].rsplit(" ", 1)[1] for e in gab}
        self.assertEqual(names["bigger"], {"tokens_per_s", "mfu"})
        self.assertIn("status", names["smaller"])
        self.assertIn("step_time_s", names["smaller"])

    def test_export_google_benchmark_format(self):
        gb = self.export("gbench", self.out)
        self.assertEqual(gb["context"]["executable"], "shardbench")
        self.assertEqual(len(gb["benchmarks"]), len(registered_strategies()))
        doc = load(self.out)
        for b, r in zip(gb["benchmarks"], doc["results"]):
            self.assertEqual(b["name"], "tiny/w4n2/fp32/" + r["strategy"])
            self.assertEqual(b["time_unit"], "ms")
            self.assertAlmostEqual(b["real_time"], r["step_time_s"]["median"] * 1e3)
            self.assertEqual(b["iterations"], 2)
            self.assertAlmostEqual(b["tokens_per_s"], r["throughput"]["tokens_per_s"])


class ZeroppPredictTest(unittest.TestCase):
    def test_zeropp_pays_where_nodes_are_slow_and_costs_where_they_are_fast(self):
        # The predictor on gpt2-1.5b at 32 ranks (4 x 8): ZeRO++ (hpZ + qwZ + qgZ) moves a
        # fraction of zero3's bytes across nodes. With one 100 Gb/s NIC per node (the committed
        # bench/clusters/dgx-h100-100g.json) that is faster; on DGX H100's eight 400 Gb/s NICs the
        # latency of qgZ's per-tensor collectives costs more than the bytes save.
        d = tempfile.mkdtemp(prefix="sbzpp")
        slow = os.path.join(ROOT, "bench", "clusters", "dgx-h100-100g.json")
        zeropp = ["--zero-hpz-partition-size", "8", "--zero-quantized-weights", "on",
                  "--zero-quantized-gradients", "on", "--zero-communication-data-type", "fp16"]
        rate = {}
        for cluster in ("dgx-h100", slow):
            for knobs in ([], zeropp):
                path = os.path.join(d, f"{len(rate)}.json")
                p = sb("predict", "--model", "gpt2-1.5b", "--world", "32", "--ranks-per-node", "8",
                       "--strategies", "zero3", "--cluster", cluster, *knobs, "--json", path)
                self.assertEqual(p.returncode, 0, p.stderr)
                (r,) = load(path)["results"]
                rate[(cluster, bool(knobs))] = (r["throughput"]["tokens_per_s"],
                                                r["comm"]["per_step"]["sent_bytes_inter"])
        for cluster in ("dgx-h100", slow):
            self.assertLess(rate[(cluster, True)][1], 0.3 * rate[(cluster, False)][1])
        self.assertGreater(rate[(slow, True)][0], 2 * rate[(slow, False)][0])
        self.assertLess(rate[("dgx-h100", True)][0], rate[("dgx-h100", False)][0])


class FsdpFileReduceDtypeTest(unittest.TestCase):
    def test_an_fsdp_files_fp32_reduce_is_fsdp2s_as_the_flag(self):
        # MixedPrecisionPolicy(bf16, reduce fp32) from --fsdp-config reaches the fsdp2 row (the
        # options table binds the file to fsdp_* rows; this policy is FSDP2's): its payload is
        # the --fsdp2-reduce-dtype fp32 one, larger than the bf16 reduce's.
        d = tempfile.mkdtemp(prefix="sbfred")
        f = os.path.join(ROOT, "tests", "cli", "fsdp_configs", "bad_reduce_dtype.json")
        payload = {}
        for name, extra in (("file", ["--fsdp-config", f]), ("flag", ["--fsdp2-reduce-dtype", "fp32"]),
                            ("none", [])):
            out = os.path.join(d, name + ".json")
            p = sb("predict", "--model", "gpt2-124m", "--world", "8", "--strategies", "fsdp2",
                   "--json", out, *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            payload[name] = load(out)["results"][0]["comm"]["per_step"]["payload_bytes"]
        self.assertEqual(payload["file"], payload["flag"])
        self.assertGreater(payload["flag"], payload["none"])


class AtomicWriteTest(unittest.TestCase):
    """The results file is rewritten after every strategy as temp file + rename. The hidden
    fault points kill rank 0 (SIGKILL) in its second write: halfway through the temp file, or
    with the temp file complete but not renamed. Either way the file keeps the first strategy's
    complete document, and --resume finishes the matrix (the dead run's lock is gone)."""

    def interrupted(self, where):
        tmp = tempfile.mkdtemp(prefix="sbkill")
        out = os.path.join(tmp, "r.json")
        p = sb("run", "--np", "2", "--model", "tiny", "--strategies", "ddp,zero1,zero2",
               "--steps", "1", "--warmup", "0", "--out", out, "--quiet",
               "--inject-fault", "0:2:" + where, timeout=120)
        self.assertNotEqual(p.returncode, 0)
        doc = load(out)  # a complete JSON document, never a torn one
        self.assertEqual([r["strategy"] for r in doc["results"]], ["ddp"])
        self.assertEqual(validate(out).returncode, 0)
        temps = [f for f in os.listdir(tmp) if f.startswith("r.json.tmp.")]
        self.assertEqual(len(temps), 1, os.listdir(tmp))
        with open(os.path.join(tmp, temps[0])) as f:
            text = f.read()
        p = sb("run", "--np", "2", "--model", "tiny", "--strategies", "ddp,zero1,zero2",
               "--steps", "1", "--warmup", "0", "--out", out, "--quiet", "--resume")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([r["status"] for r in load(out)["results"]], ["ok"] * 3)
        self.assertFalse(os.path.exists(os.path.join(tmp, temps[0])), "stale temp file kept")
        return text

    def test_killed_halfway_through_the_temp_file(self):
        text = self.interrupted("kill-mid-write")
        with self.assertRaises(json.JSONDecodeError):  # the write itself was interrupted
            json.loads(text)

    def test_killed_between_write_and_rename(self):
        text = self.interrupted("kill-before-rename")
        self.assertEqual(len(json.loads(text)["results"]), 2)  # written, never renamed


class ConcurrencyTest(unittest.TestCase):
    """A second run on the same --out exits 2 naming the lock, and writes nothing; the --np
    launcher ends its MPI job on SIGTERM and on its own death, and leaves no OpenMPI session
    directory (shared-memory segments) in /dev/shm."""

    def start_long_run(self, out):
        p = subprocess.Popen([SB, "run", "--np", "2", "--model", "tiny", "--strategies", "ddp",
                              "--steps", "1000000", "--warmup", "0", "--out", out, "--quiet"],
                             env=ENV, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        lock = out + ".lock"
        deadline = time.time() + 60
        while time.time() < deadline:  # rank 0 (not the launcher's probe) holds the lock
            try:
                with open(lock) as f:
                    holder = f.read().strip()
                if holder and holder != str(p.pid):
                    return p, int(holder)
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        p.kill()
        self.fail("rank 0 never took the lock")

    def job_dir(self, p):
        return f"/dev/shm/shardbench.{p.pid}"

    def gone(self, pid, seconds=30):
        """True once pid has exited (a zombie waiting for its reaper counts as exited)."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        return True
            except (FileNotFoundError, ProcessLookupError):
                return True
            time.sleep(0.1)
        return False

    def test_second_run_on_the_same_out_is_refused_then_sigterm_cleans_up(self):
        out = os.path.join(tempfile.mkdtemp(prefix="sblock"), "r.json")
        p, rank0 = self.start_long_run(out)
        self.assertTrue(os.path.isdir(self.job_dir(p)), "the job's private session dir")
        for args in (["--np", "2"], []):
            q = sb("run", *args, "--model", "tiny", "--strategies", "ddp", "--steps", "1",
                   "--out", out, "--quiet")
            self.assertEqual(q.returncode, 2, q.stderr)
            self.assertIn(f"--out {out}: another shardbench run (pid {rank0}) is writing it",
                          q.stderr)
            self.assertFalse(os.path.exists(out), "the refused run wrote nothing")
        p.terminate()  # SIGTERM to the launcher only: it forwards it to mpirun
        p.wait(timeout=60)
        self.assertEqual(p.returncode, -signal.SIGTERM)
        self.assertFalse(os.path.exists(self.job_dir(p)), os.listdir("/dev/shm"))
        self.assertTrue(self.gone(rank0), "rank 0 still running")
        q = sb("run", "--model", "tiny", "--strategies", "ddp", "--steps", "1", "--out", out,
               "--quiet")
        self.assertEqual(q.returncode, 0, q.stderr)  # the lock went with the job

    def test_killed_launcher_ends_the_job_and_the_next_launch_sweeps_its_segments(self):
        out = os.path.join(tempfile.mkdtemp(prefix="sbkill9"), "r.json")
        p, rank0 = self.start_long_run(out)
        os.kill(p.pid, signal.SIGKILL)  # no clean-up possible in the launcher itself
        p.wait()
        self.assertTrue(self.gone(rank0), "mpirun should end the job")
        q = sb("run", "--np", "1", "--model", "tiny", "--strategies", "ddp", "--steps", "1",
               "--out", out + ".2", "--quiet")
        self.assertEqual(q.returncode, 0, q.stderr)
        self.assertFalse(os.path.exists(self.job_dir(p)), "a stale session dir was left")


class FaultTest(unittest.TestCase):
    """A rank that exits or hangs at step 9 (strategy 5 of 8, two steps each) ends the job in
    bounded time, names the rank and the collective, and leaves the first four strategies'
    results intact; --resume then finishes the matrix without redoing them. A rank that runs
    out of memory there (one rank only, mid-step) fails that strategy alone: it is recorded as
    oom with that rank's message and the other seven still run."""

    def run_fault(self, kind):
        out = os.path.join(tempfile.mkdtemp(prefix="sbfault"), "r.json")
        t0 = time.time()
        p = sb("run", "--np", "4", "--ranks-per-node", "2", "--model", "tiny", "--steps", "2",
               "--warmup", "0", "--timeout-s", "5", "--inject-fault", "2:9:" + kind, "--out", out,
               "--quiet", timeout=120)
        return p, out, time.time() - t0

    def check(self, kind, needles):
        p, out, seconds = self.run_fault(kind)
        self.assertNotEqual(p.returncode, 0)
        self.assertLess(seconds, 60)
        for n in needles:
            self.assertIn(n, p.stderr + p.stdout)
        doc = load(out)
        self.assertEqual([r["strategy"] for r in doc["results"]], ["ddp", "zero1", "zero2", "zero3"])
        self.assertEqual(validate(out).returncode, 0)
        return out

    def test_hang(self):
        self.check("hang", ["[rank 2] injected fault: hang", "watchdog: ", "waiting on ring predecessor rank",
                            "--timeout-s"])

    def test_hang_and_exit_with_the_side_comm_stream(self):
        # fsdp_hybrid_shard runs its inter-node all-reduces on a second comm thread with MPI
        # communicators of its own: a rank that hangs or exits still ends the job in bounded time.
        for kind, needle in (("hang", "watchdog: "), ("exit", "injected fault: exit")):
            with self.subTest(kind=kind):
                t0 = time.time()
                p = sb("run", "--np", "4", "--ranks-per-node", "2", "--model", "tiny",
                       "--strategies", "fsdp_hybrid_shard", "--steps", "3", "--warmup", "0",
                       "--timeout-s", "5", "--inject-fault", "2:1:" + kind, "--out",
                       os.path.join(tempfile.mkdtemp(prefix="sbfault"), "r.json"), "--quiet",
                       timeout=120)
                self.assertNotEqual(p.returncode, 0)
                self.assertLess(time.time() - t0, 60)
                self.assertIn(needle, p.stderr + p.stdout)

    def test_exit_then_resume(self):
        out = self.check("exit", ["[rank 2] injected fault: exit at step 9"])
        p = sb("run", "--np", "4", "--ranks-per-node", "2", "--model", "tiny", "--steps", "2",
               "--warmup", "0", "--out", out, "--resume")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.count("--resume"), 4)
        doc = load(out)
        self.assertEqual([r["status"] for r in doc["results"]], ["ok"] * len(registered_strategies()))
        p = sb("run", "--np", "4", "--ranks-per-node", "2", "--model", "tiny", "--steps", "3",
               "--warmup", "0", "--out", out, "--resume")
        self.assertEqual(p.returncode, 2)
        self.assertIn("different configuration", p.stderr)

    def test_oom_on_one_rank_fails_only_that_strategy(self):
        p, out, seconds = self.run_fault("oom")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertLess(seconds, 60)
        self.assertNotIn("watchdog", p.stderr)
        doc = load(out)
        status = {r["strategy"]: r["status"] for r in doc["results"]}
        self.assertEqual(sorted(status), sorted(registered_strategies()))
        self.assertEqual(status.pop("fsdp_full_shard"), "oom")
        self.assertEqual(set(status.values()), {"ok"})
        err = next(r["error"] for r in doc["results"] if r["strategy"] == "fsdp_full_shard")
        self.assertIn("rank 2: out of memory", err)
        self.assertIn("per-rank limit", err)
        self.assertEqual(validate(out).returncode, 0)


class CliSurfaceTest(unittest.TestCase):
    """--version, grouped --help with examples, one spelling per knob, `compare`."""

    def test_version_names_the_commit(self):
        p = sb("--version")
        self.assertEqual(p.returncode, 0, p.stderr)
        words = p.stdout.split()
        self.assertEqual(words[0], "shardbench")
        commit = words[-1].rstrip(")")
        self.assertTrue(commit == "unknown" or len(commit) == 40, p.stdout)

    def test_the_command_does_not_load_cublas_to_start(self):
        # cuBLAS is opened by the CUDA device on first use (harness/device/cuda/cublas_api.h):
        # linked, its set-up cost every process 0.4 s at start (a run: launcher + each rank)
        p = subprocess.run(["readelf", "-d", SB], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", p.stdout)
        self.assertTrue(any(n.startswith("libc.so") for n in needed), p.stdout)
        self.assertFalse([n for n in needed if n.startswith("libcublas")], needed)

    def test_help_is_grouped_and_ends_with_examples(self):
        helps = {}
        for cmd in ("run", "predict"):
            p = sb(cmd, "--help")
            self.assertEqual(p.returncode, 0, p.stderr)
            for group in ("Workload:", "Topology:", "Strategy knobs: DDP and ZeRO-1/2:",
                          "Strategy knobs: ZeRO-3 and ZeRO++:", "Strategy knobs: MiCS:",
                          "Strategy knobs: FSDP:", "Strategy knobs: FSDP2:", "Output:"):
                self.assertIn(group, p.stdout, cmd)
            examples = p.stdout.split("Examples:")[1].strip().splitlines()
            self.assertEqual(len(examples), 3, cmd)
            helps[cmd] = p.stdout
        # every strategy and workload knob is spelt the same in both commands
        def flags(text):
            return {w for w in re.findall(r"^\s+(--[a-z0-9-]+)", text, re.M)}
        shared = flags(helps["run"].split("Measurement:")[0])
        missing = {f for f in shared if f not in flags(helps["predict"])}
        self.assertEqual(missing, {"--np", "--hosts", "--inter-gbps", "--inter-latency-ms",
                                   "--collectives", "--device"})

    def test_examples_in_help_run(self):
        # the three examples of `predict --help` are real commands (cheap: no MPI)
        p = sb("predict", "--help")
        for line in p.stdout.split("Examples:")[1].strip().splitlines():
            args = line.split()[1:]
            d = tempfile.mkdtemp(prefix="sbex")
            ds = os.path.join(d, "my_ds.json")
            with open(ds, "w") as f:
                f.write('{"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}}')
            args = [ds if a == "my_ds.json" else a for a in args]
            q = sb(*args)
            self.assertEqual(q.returncode, 0, line + q.stderr)

    def test_compare_subcommand_is_compare_py(self):
        base = os.path.join(ROOT, "results", "baseline")
        files = sorted(os.path.join(base, f) for f in os.listdir(base) if f.endswith(".json"))
        p = sb("compare", files[0], files[0])
        q = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "plots", "compare.py"),
                            files[0], files[0]], capture_output=True, text=True)
        self.assertEqual((p.returncode, p.stdout), (q.returncode, q.stdout))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


class UsageErrorTest(unittest.TestCase):
    def test_bad_input_is_one_clear_line_and_exit_2(self):
        for args, needle in bad_inputs.CASES:
            with self.subTest(args=args):
                p, out = bad_inputs.run_case(SB, args)
                self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                self.assertIn(needle, p.stderr)
                self.assertLessEqual(len(p.stderr.strip().splitlines()), 2, p.stderr)
                self.assertFalse(os.path.exists(out), "nothing may be written on a usage error")

    def test_missing_directories_are_created_by_every_command(self):
        d = os.path.join(tempfile.mkdtemp(prefix="sbdirs"), "a", "b")
        run_out, pred, exp = (os.path.join(d, n, "x.json") for n in ("run", "predict", "export"))
        # (whole-number flags in scientific notation, as the README's defaults are written)
        p = sb("run", "--model", "tiny", "--strategies", "ddp", "--steps", "1", "--warmup", "0",
               "--out", run_out, "--quiet", "--prefetch-elements", "5e7", "--seed", "1.2e3")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(load(run_out)["config"]["prefetch_elements"], 50000000)
        self.assertEqual(load(run_out)["config"]["seed"], 1200)
        p = sb("predict", "--model", "tiny", "--world", "2", "--json", pred)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = sb("export", "--format", "bencher", run_out, "--out", exp)
        self.assertEqual(p.returncode, 0, p.stderr)
        for f in (run_out, pred, exp):
            self.assertIsInstance(load(f), dict)

    def test_prediction_documents_validate_and_are_not_taken_for_runs(self):
        d = tempfile.mkdtemp(prefix="sbpred")
        docs = {"table": ["--model", "tiny", "--world", "3"],
                "params": ["--params", "7.5e9", "--world", "64", "--strategies", "ddp,zero3"],
                "fit": ["--model", "gpt2-1.5b", "--cluster", "cpu-local", "--fit",
                        "--max-world", "2", "--strategies", "ddp,zero3"]}
        for name, args in docs.items():
            path = os.path.join(d, name + ".json")
            p = sb("predict", *args, "--json", path)
            self.assertEqual(p.returncode, 0, p.stderr)
            v = validate(path)
            self.assertEqual(v.returncode, 0, v.stdout)
            self.assertIn("kind prediction", v.stdout)
        path = os.path.join(d, "table.json")
        p = sb("export", "--format", "bencher", path)
        self.assertEqual(p.returncode, 2)
        self.assertIn("a prediction (kind 'prediction'), not a run's results", p.stderr)
        for tool in ("plot_results.py", "compare.py"):
            args = [path, "--out", os.path.join(d, "plots")] if tool == "plot_results.py" \
                else [path, path]
            p = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "plots", tool), *args],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, tool + p.stdout + p.stderr)
            self.assertIn("a prediction (kind 'prediction')", p.stderr, tool)
        # The schema rejects a prediction that lost its numbers.
        doc = load(path)
        del doc["results"][0]["memory"]
        with open(path, "w") as f:
            json.dump(doc, f)
        self.assertEqual(validate(path).returncode, 1)

    def test_run_where_no_strategy_succeeds_exits_1_and_so_does_its_export(self):
        out = os.path.join(tempfile.mkdtemp(prefix="sboom"), "r.json")
        p = sb("run", "--model", "tiny", "--strategies", "ddp,zero1", "--steps", "1",
               "--warmup", "0", "--mem-limit-gb", "0.0001", "--out", out, "--quiet")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("no strategy succeeded", p.stderr)
        doc = load(out)  # written all the same: it says why each failed
        self.assertEqual([r["status"] for r in doc["results"]], ["oom", "oom"])
        self.assertEqual(validate(out).returncode, 0)
        p = sb("export", "--format", "bencher", out)
        self.assertEqual(p.returncode, 1)
        self.assertIn("no strategy with status ok", p.stderr)

    def test_export_rejects_foreign_and_corrupt_files(self):
        d = tempfile.mkdtemp()
        bad = os.path.join(d, "bad.json")
        for content in ("{not json", '{"suite": "other", "results": []}', "[1, 2]"):
            with open(bad, "w") as f:
                f.write(content)
            p = sb("export", "--format", "bencher", bad)
            self.assertEqual(p.returncode, 2, content)
            self.assertIn("export:", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
