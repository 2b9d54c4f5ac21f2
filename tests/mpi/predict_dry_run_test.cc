// The predictor against the run, differentially: the real job (this mpirun's ranks, the ring
// backend's counted bytes, the CPU device's tracked allocations) and `predict` (the same
// strategy code dry-run on the simulated device and backend, from rank 0's symmetric view) on
// the same config must agree exactly on bytes intra and inter (summed over ranks), collectives
// and payload per step, padded parameters, model-state bytes and — with --overlap off, where
// buffers are freed at fixed points — peak memory and its breakdown. Every strategy, across
// the knobs, on tiny and on a shape whose tensors do not divide the world (padding).
#include <gtest/gtest.h>

#include <functional>
#include <ostream>

#include "harness/predict/predict.h"
#include "harness/model/checkpointing.h"
#include "tests/mpi/run_fixture.h"

namespace sb::testing {
namespace {

struct Knobs {
  std::string name;
  std::function<void(RunConfig&)> set;
  std::string only{};  // a strategy-name prefix the knobs apply to; empty: every strategy
};

// Each variation of the knobs the strategies read (defaults otherwise).
std::vector<Knobs> knob_cases() {
  return {
      {"defaults", [](RunConfig&) {}},
      {"bf16", [](RunConfig& c) { c.options.precision = Precision::kBf16Mixed; }},
      {"wrap_model", [](RunConfig& c) { c.options.wrap = "model"; }},
      {"wrap_every2", [](RunConfig& c) { c.options.wrap = "every-2"; }},
      {"small_buckets", [](RunConfig& c) { c.options.bucket_mb = 0.004; }},
      {"prefetch_persist",
       [](RunConfig& c) {
         c.options.prefetch_elements = 300;
         c.options.persist_elements = 100;
       }},
      {"fwd_prefetch_bwd_post",
       [](RunConfig& c) {
         c.options.forward_prefetch = true;
         c.options.backward_prefetch = BackwardPrefetch::kPost;
       }},
      {"bwd_none_no_limit",
       [](RunConfig& c) {
         c.options.backward_prefetch = BackwardPrefetch::kNone;
         c.options.limit_all_gathers = false;
       }},
      {"zero_paper", [](RunConfig& c) { apply_zero_schedule(ZeroSchedule::kPaper, c.options); },
       "zero"},
      // use_multi_rank_bucket_allreduce false: one reduce per owner (zero1 and zero2 only read it)
      {"reduce_per_owner_small_buckets",
       [](RunConfig& c) {
         c.options.zero_grad_reduce = ZeroGradReduce::kReducePerOwner;
         c.options.bucket_mb = 0.004;
       },
       "zero1"},
      {"reduce_per_owner_bf16_accum2",
       [](RunConfig& c) {
         c.options.zero_grad_reduce = ZeroGradReduce::kReducePerOwner;
         c.options.precision = Precision::kBf16Mixed;
         c.options.grad_accum = 2;
       },
       "zero2"},
      {"reuse3000_small_buckets",
       [](RunConfig& c) {
         c.options.reuse_distance = 3000;
         c.options.bucket_mb = 0.004;
       },
       "zero"},
      {"zero3_live0_model_persist100_per_tensor",
       [](RunConfig& c) {
         c.options.max_live_elements = 0;
         c.options.persist_elements = 100;
         c.options.model_persist_elements = 100;
         c.options.zero3_coalesced_fetch = false;
       },
       "zero3"},
      {"zero3_live3000_persist100",
       [](RunConfig& c) {
         c.options.max_live_elements = 3000;
         c.options.persist_elements = 100;
       },
       "zero3"},
      {"fsdp2_node_prefetch2",
       [](RunConfig& c) {
         c.options.fsdp2_reshard_after_forward = run_env().topo.ranks_per_node();
         c.options.fsdp2_prefetch = 2;
       },
       "fsdp2"},
      {"fsdp2_no_reshard_no_prefetch",
       [](RunConfig& c) {
         c.options.fsdp2_reshard_after_forward = 0;
         c.options.fsdp2_prefetch = 0;
       },
       "fsdp2"},
      {"mics_hierarchical",
       [](RunConfig& c) {
         const Topology& t = run_env().topo;
         const int P = t.partition_size(), G = t.ranks_per_node();
         c.options.mics_schedule = MicsSchedule::kPerUnit;
         c.options.mics_hierarchical_params_gather = P > G && P % G == 0;
       },
       "mics"},
      // ZeRO++: hpZ's node gathers need the paper's release schedule to be used at all
      {"zeropp_hpz_qwz_paper",
       [](RunConfig& c) {
         apply_zero_schedule(ZeroSchedule::kPaper, c.options);
         c.options.zero_hpz_partition_size = run_env().topo.ranks_per_node();
         c.options.zero_quantized_weights = true;
       },
       "zero3"},
      {"zeropp_qwz_bf16_persist",
       [](RunConfig& c) {
         c.options.precision = Precision::kBf16Mixed;
         c.options.persist_elements = 100;
         c.options.zero_quantized_weights = true;
       },
       "zero3"},
      // ZeRO++ inside the coalesced fetch: reuse 0 (stage3_max_reuse_distance 0) so backward
      // gathers the secondary partitions as batches (all three knobs, as DeepSpeed's tutorial
      // sets them); a small live window splits the prefetch
      {"zeropp_all_coalesced_reuse0",
       [](RunConfig& c) {
         c.options.reuse_distance = 0;
         c.options.zero_hpz_partition_size = run_env().topo.ranks_per_node();
         c.options.zero_quantized_weights = true;
         c.options.zero_quantized_gradients = true;
       },
       "zero3"},
      {"zeropp_hpz_coalesced_reuse0_live3000",
       [](RunConfig& c) {
         c.options.reuse_distance = 0;
         c.options.max_live_elements = 3000;
         c.options.zero_hpz_partition_size = run_env().topo.ranks_per_node();
       },
       "zero3"},
      // qgZ: int4 all-to-alls across nodes (its collectives need more than one node)
      {"zeropp_qgz_bf16",
       [](RunConfig& c) {
         c.options.precision = Precision::kBf16Mixed;
         c.options.zero_quantized_gradients = true;
       },
       "zero3"},
      {"zeropp_all_paper_overlap_off",
       [](RunConfig& c) {
         apply_zero_schedule(ZeroSchedule::kPaper, c.options);
         c.options.overlap = false;
         c.options.zero_hpz_partition_size = run_env().topo.ranks_per_node();
         c.options.zero_quantized_weights = true;
         c.options.zero_quantized_gradients = true;
       },
       "zero3"},
      {"untied_bf16_naive_attention",
       [](RunConfig& c) {
         c.model.tied_head = false;
         c.options.precision = Precision::kBf16Mixed;
         c.model.attention = AttentionKind::kNaive;  // defaults and the rest run fused
       }},
      // Activation checkpointing: the recompute's hooks (ZeRO-3/MiCS gather again, FSDP's
      // backward gather covers it) and its smaller activations, with each attention and bf16.
      {"ac_block_naive_attention",
       [](RunConfig& c) {
         c.model.checkpoint_every = 1;
         c.model.attention = AttentionKind::kNaive;
       }},
      {"ac_every2_bf16_zero_paper",
       [](RunConfig& c) {
         c.model.checkpoint_every = 2;
         c.options.precision = Precision::kBf16Mixed;
         apply_zero_schedule(ZeroSchedule::kPaper, c.options);
       }},
      {"ac_block_prefetch_bwd_post",
       [](RunConfig& c) {
         c.model.checkpoint_every = 1;
         c.options.prefetch_elements = 300;
         c.options.backward_prefetch = BackwardPrefetch::kPost;
         c.options.fsdp2_prefetch = 2;
       }},
      // op checkpointing (every block's recompute fires its modules' hooks; the kept ops' outputs
      // per layer) and the chunked loss (fp32 chunks over bf16 logits), fp32 and bf16.
      {"ac_op_chunked_loss_bf16",
       [](RunConfig& c) {
         c.model.checkpoint_every = kCheckpointOp;
         c.model.cross_entropy = CrossEntropyKind::kChunked;
         c.options.precision = Precision::kBf16Mixed;
         apply_zero_schedule(ZeroSchedule::kPaper, c.options);
       }},
      {"ac_op_naive_chunked_loss",
       [](RunConfig& c) {
         c.model.checkpoint_every = kCheckpointOp;
         c.model.cross_entropy = CrossEntropyKind::kChunked;
         c.model.attention = AttentionKind::kNaive;
       }},
      {"ddp_view_small_buckets",
       [](RunConfig& c) {
         c.options.ddp.gradient_as_bucket_view = true;
         c.options.ddp.first_bucket_mb = 0.01;
         c.options.ddp.bucket_cap_mb = 0.03;
       }},
      {"ddp_grad_accum3_view",
       [](RunConfig& c) {
         c.options.grad_accum = 3;
         c.options.ddp.gradient_as_bucket_view = true;
       }},
      {"accum_k2_bwd_post",
       [](RunConfig& c) {
         c.options.grad_accum = 2;
         c.options.backward_prefetch = BackwardPrefetch::kPost;
       }},
      {"accum_k3_every_micro_bf16",
       [](RunConfig& c) {
         c.options.grad_accum = 3;
         c.options.fsdp_no_sync = false;
         c.options.precision = Precision::kBf16Mixed;
       }},
      {"fsdp_orig_params_bf16",  // use_orig_params: every tensor 16-byte aligned
       [](RunConfig& c) {
         c.options.fsdp_use_orig_params = true;
         c.options.precision = Precision::kBf16Mixed;
       },
       "fsdp_"},
      {"fsdp2_accum_k2",  // set_requires_gradient_sync(False) on the first micro-batch
       [](RunConfig& c) { c.options.grad_accum = 2; },
       "fsdp2"},
      {"mics_accum_k3_bf16",  // a reduce-scatter every micro-batch, the replica all-reduce once
       [](RunConfig& c) {
         c.options.grad_accum = 3;
         c.options.precision = Precision::kBf16Mixed;
       },
       "mics"},
      {"accum_k2_zero_paper_small_buckets",  // ZeRO-2's reduce-scatter beside the partition
       [](RunConfig& c) {
         c.options.grad_accum = 2;
         c.options.bucket_mb = 0.004;
         apply_zero_schedule(ZeroSchedule::kPaper, c.options);
       },
       "zero"},
      {"ddp_bf16_params",
       [](RunConfig& c) {
         c.options.precision = Precision::kBf16Mixed;
         c.options.ddp.bf16_params = true;
       }},
  };
}

// Shapes: tiny (28,032 params) and one whose tensor sizes are mostly odd (C = 21, V = 37,
// T = 9), so worlds of 2..4 pad the shards, buckets and units; then the Llama block on its tiny
// preset and on its padding preset (no tensor or unit divides 3).
std::vector<std::string> shapes() {
  return {"tiny", "3,21,3,9,37", "llama-tiny", "llama-tiny-pad"};
}

struct Case {
  std::string shape, strategy;
  Knobs knobs;
  bool overlap;
};

std::string case_name(const Case& c) {
  std::string s = c.shape == "tiny"             ? "tiny"
                  : c.shape == "llama-tiny"     ? "llama"
                  : c.shape == "llama-tiny-pad" ? "llamapad"
                                                : "odd";
  return s + "_" + c.strategy + "_" + c.knobs.name + (c.overlap ? "_overlap" : "_serial");
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const std::string& shape : shapes())
    for (const std::string& s : strategy_names())
      for (const Knobs& k : knob_cases()) {
        if (s.rfind(k.only, 0) != 0) continue;  // a family's own knobs change nothing elsewhere
        if (k.name.rfind("ddp_", 0) == 0 && s != "ddp") continue;  // read by ddp only
        // accumulation as the strategies that support it (the others end with a clear error)
        if (k.name.rfind("accum_", 0) == 0 && s.rfind("fsdp_", 0) != 0 && s.rfind("zero", 0) != 0)
          continue;
        for (bool overlap : {false, true}) v.push_back({shape, s, k, overlap});
      }
  return v;
}

class DryRun : public ::testing::TestWithParam<Case> {};

TEST_P(DryRun, PredictEqualsTheRun) {
  const Case& c = GetParam();
  const Topology& topo = run_env().topo;
  RunConfig cfg = tiny_config(Precision::kFp32, 1);
  cfg.model = parse_model(c.shape);
  cfg.batch_per_rank = 1;
  cfg.warmup = 1;
  c.knobs.set(cfg);
  cfg.options.overlap = c.overlap;
  const StrategyRun r = run(c.strategy, cfg, false);
  ASSERT_EQ(r.status, "ok") << r.error;

  const Prediction p =
      predict(predict_config_for(cfg, topo), c.strategy, load_cluster("cpu-local"), &topo);

  EXPECT_EQ(r.sent_intra_all, p.traffic.sent_intra) << "intra-node bytes per step, all ranks";
  EXPECT_EQ(r.sent_inter_all, p.traffic.sent_inter) << "inter-node bytes per step, all ranks";
  EXPECT_EQ(r.sent_max_rank, p.traffic.max_rank_sent);
  EXPECT_EQ(r.step_entries.size(), p.traffic.collectives) << "collectives per step";
  uint64_t counts[kNumCollKinds][kNumGroupKinds] = {};  // per kind and group, as the prediction's by_kind
  for (const LedgerEntry& e : r.step_entries) ++counts[int(e.kind)][int(e.group)];
  for (int k = 0; k < kNumCollKinds; ++k)
    for (int g = 0; g < kNumGroupKinds; ++g)
      EXPECT_EQ(counts[k][g], p.traffic.by_kind[k][g].count)
          << coll_name(CollKind(k)) << " over " << group_name(GroupKind(g));
  EXPECT_EQ(r.payload_bytes, p.traffic.payload_bytes);
  EXPECT_EQ(r.padded_params, p.padded_params);
  EXPECT_EQ(r.model_state_params, p.state_params);
  EXPECT_EQ(r.model_state_grads, p.state_grads);
  EXPECT_EQ(r.model_state_optimizer, p.state_optimizer);
  if (c.overlap) return;  // asynchronous frees follow the wall clock: the peak is a model then
  EXPECT_EQ(r.peak_bytes, p.peak);
  for (int k = 0; k < kNumMemCategories; ++k)
    EXPECT_EQ(r.breakdown_at_peak[k], p.at_peak[k]) << category_name(MemCategory(k));
}

INSTANTIATE_TEST_SUITE_P(AllStrategiesAndKnobs, DryRun, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return case_name(info.param); });

}  // namespace
}  // namespace sb::testing
