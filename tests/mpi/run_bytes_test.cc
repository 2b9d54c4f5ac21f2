// Bytes: the ledger's counted per-step traffic of every strategy equals the closed forms of
// tests/closed_forms.h (ring: nccl-tests PERFORMANCE.md; volumes: ZeRO paper §7, FSDP paper §3),
// with the real padded sizes and ZeRO-3's persistence threshold, in fp32 and bf16-mixed. Under
// --model=odd (a world of 3) no tensor, unit or bucket divides the world, so every padding rule
// is exercised; there every hop of a world ring is of one class (3 nodes of 1, or 1 node of 3).
#include <gtest/gtest.h>

#include "tests/closed_forms.h"
#include "harness/model/checkpointing.h"
#include "tests/mpi/run_fixture.h"

namespace sb::testing {
namespace {

// reshard: FSDP2's reshard_after_forward (kFsdp2ReshardAuto None, kFsdp2ReshardTrue True,
// 0 False, kNode the node's ranks per node).
// hier: MiCS's hierarchical all-gather (skipped where the partition does not span whole nodes).
struct Case {
  std::string strategy;
  Precision precision;
  uint64_t persist;
  ZeroSchedule schedule = ZeroSchedule::kShipped;
  int reshard = -1;
  bool hier = false;
  int ac = 0;  // --activation-checkpointing: 0 none, K every K-th block (1 block)
  bool reduce_fp32 = false;  // FSDP2 MixedPrecisionPolicy(reduce_dtype=fp32)
  MicsSchedule mics = MicsSchedule::kShipped;
};

constexpr int kNode = -3;

class Bytes : public ::testing::TestWithParam<Case> {};

TEST_P(Bytes, CountedTrafficEqualsClosedForm) {
  const Case& c = GetParam();
  RunConfig cfg = tiny_config(c.precision, 2);
  cfg.model.checkpoint_every = c.ac;
  if (c.ac == kCheckpointOp) cfg.model.cross_entropy = CrossEntropyKind::kChunked;
  cfg.options.persist_elements = c.persist;
  apply_zero_schedule(c.schedule, cfg.options);
  const Topology& topo = run_env().topo;
  cfg.options.fsdp2_reshard_after_forward = c.reshard == kNode ? topo.ranks_per_node() : c.reshard;
  const int P = topo.partition_size(), G = topo.ranks_per_node();
  if (c.hier && (P <= G || P % G != 0)) GTEST_SKIP() << "the partition does not span nodes";
  cfg.options.mics_hierarchical_params_gather = c.hier;
  cfg.options.fsdp2_reduce_fp32 = c.reduce_fp32;
  cfg.options.mics_schedule = c.mics;
  const StrategyRun r = run(c.strategy, cfg, false);
  ASSERT_EQ(r.status, "ok") << r.error;
  EXPECT_TRUE(r.traffic_counted);
  const closed_forms::Bytes e =
      closed_forms::expected_bytes(c.strategy, make_layout(cfg.model), c.precision, c.persist,
                                   topo.world_size(), topo.ranks_per_node(),
                                   cfg.options.zero_grad_reduce, cfg.options.reuse_distance,
                                   cfg.options.fsdp2_reshard_after_forward, P, c.hier, false,
                                   UINT64_MAX, c.reduce_fp32, c.mics);
  EXPECT_EQ(double(r.sent_intra_all), e.intra) << "intra-node bytes per step, summed over ranks";
  EXPECT_EQ(double(r.sent_inter_all), e.inter) << "inter-node bytes per step, summed over ranks";
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const auto& s : strategy_names())
    for (Precision p : {Precision::kFp32, Precision::kBf16Mixed}) v.push_back({s, p, 0});
  v.push_back({"zero3", Precision::kFp32, 100});   // layer norms and biases stay whole
  v.push_back({"zero3", Precision::kBf16Mixed, 5000});
  // The papers' schedules (reduce-scatter; ZeRO-3 releasing every gather), with padding.
  for (const char* s : {"zero1", "zero2", "zero3"})
    for (Precision p : {Precision::kFp32, Precision::kBf16Mixed})
      v.push_back({s, p, 0, ZeroSchedule::kPaper});
  v.push_back({"zero3", Precision::kFp32, 100, ZeroSchedule::kPaper});
  v.push_back({"fsdp2", Precision::kFp32, 0, ZeroSchedule::kShipped, 0});         // reshard_after_forward=False
  v.push_back({"fsdp2", Precision::kFp32, 0, ZeroSchedule::kShipped, kNode});      // =ranks per node: backward in the node
  v.push_back({"fsdp2", Precision::kBf16Mixed, 0, ZeroSchedule::kShipped, kNode});
  // An explicit True reshards the root too (one more all-gather of it in backward).
  for (const char* s : {"fsdp2", "fsdp2_hsdp"})
    for (Precision p : {Precision::kFp32, Precision::kBf16Mixed})
      v.push_back({s, p, 0, ZeroSchedule::kShipped, kFsdp2ReshardTrue});
  // torchtitan's MixedPrecisionPolicy: bf16 gathers, fp32 reduce-scatters (and HSDP all-reduce)
  for (const char* s : {"fsdp2", "fsdp2_hsdp"})
    for (Precision p : {Precision::kFp32, Precision::kBf16Mixed})
      v.push_back({s, p, 0, ZeroSchedule::kShipped, kFsdp2ReshardAuto, false, 0, true});
  v.push_back({"fsdp2", Precision::kBf16Mixed, 0, ZeroSchedule::kShipped, kNode, false, 1, true});
  // MiCS's per-unit schedule (--mics-schedule per-unit), with and without its two-level gather
  constexpr MicsSchedule kUnit = MicsSchedule::kPerUnit;
  for (Precision p : {Precision::kFp32, Precision::kBf16Mixed})
    for (bool hier : {false, true})
      v.push_back({"mics", p, 0, ZeroSchedule::kShipped, -1, hier, 0, false, kUnit});
  // Activation checkpointing: ZeRO-3 (paper schedule) and MiCS gather a recomputed block
  // again, every other strategy moves what it moves without (closed_forms.h).
  for (const auto& s : strategy_names()) v.push_back({s, Precision::kFp32, 0, ZeroSchedule::kShipped, -1, false, 1});
  v.push_back({"zero3", Precision::kFp32, 0, ZeroSchedule::kPaper, -1, false, 1});
  v.push_back({"zero3", Precision::kBf16Mixed, 100, ZeroSchedule::kPaper, -1, false, 2});
  v.push_back({"mics", Precision::kBf16Mixed, 0, ZeroSchedule::kShipped, -1, false, 2});
  v.push_back({"mics", Precision::kBf16Mixed, 0, ZeroSchedule::kShipped, -1, false, 2, false, kUnit});
  v.push_back({"mics", Precision::kFp32, 0, ZeroSchedule::kShipped, -1, true, 1, false, kUnit});
  v.push_back({"fsdp2", Precision::kFp32, 0, ZeroSchedule::kShipped, kNode, false, 1});
  v.push_back({"fsdp2", Precision::kFp32, 0, ZeroSchedule::kShipped, kFsdp2ReshardTrue, false, 1});
  // op checkpointing: every block's recompute fires its modules' hooks (a third gather of each
  // block under the paper's ZeRO-3 and the per-unit MiCS), with the chunked loss (no collective
  // of its own).
  for (const char* s : {"zero3", "mics", "fsdp_full_shard", "ddp"})
    v.push_back({s, Precision::kBf16Mixed, 0, ZeroSchedule::kPaper, -1, false, kCheckpointOp,
                 false, std::string(s) == "mics" ? kUnit : MicsSchedule::kShipped});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, Bytes, ::testing::ValuesIn(cases()), [](const auto& info) {
  return info.param.strategy + (info.param.precision == Precision::kFp32 ? "_fp32" : "_bf16") +
         (info.param.persist ? "_persist" + std::to_string(info.param.persist) : "") +
         (info.param.schedule == ZeroSchedule::kPaper ? "_paper" : "") +
         (info.param.reshard == 0                   ? "_no_reshard"
          : info.param.reshard == kNode             ? "_reshard_node"
          : info.param.reshard == kFsdp2ReshardTrue ? "_reshard_true"
                                                    : "") +
         (info.param.hier ? "_hierarchical" : "") +
         (info.param.ac > 0 ? "_ac_every" + std::to_string(info.param.ac)
          : info.param.ac < 0 ? std::string("_ac_op") : std::string("")) +
         (info.param.reduce_fp32 ? "_reduce_fp32" : "") +
         (info.param.mics == MicsSchedule::kPerUnit ? "_per_unit" : "");
});

// The paper's ZeRO-3 gathers tensor by tensor: more, smaller collectives than FSDP's units.
TEST(BytesShape, ZeroThreePerTensorIssuesMoreSmallerCollectivesThanFullShard) {
  RunConfig c = tiny_config(Precision::kFp32, 2);
  apply_zero_schedule(ZeroSchedule::kPaper, c.options);
  const StrategyRun z3 = run("zero3", c, false);
  const StrategyRun fs = run("fsdp_full_shard", tiny_config(Precision::kFp32, 2), false);
  ASSERT_EQ(z3.status, "ok");
  ASSERT_EQ(fs.status, "ok");
  EXPECT_GT(z3.step_entries.size(), fs.step_entries.size());
  EXPECT_LT(double(z3.payload_bytes) / z3.step_entries.size(),
            double(fs.payload_bytes) / fs.step_entries.size());
}

// Activation checkpointing every-2 on tiny's two blocks recomputes block 1 (h.1) only. ZeRO-3's
// hooks fire on the recompute: under the paper's schedule (release after every module) a tensor
// of h.1 is all-gathered three times per step (forward, recompute, backward), h.0's twice; as
// DeepSpeed ships it (reuse distance 1e9) once. FSDP and FSDP2 gather h.1's unit twice, as
// without checkpointing: the recompute runs inside the unit's backward gather.
TEST(BytesShape, RecomputeGathersTheBlockAgainUnderZero3NotUnderFsdp) {
  if (run_env().topo.world_size() < 2) GTEST_SKIP() << "needs sharding";
  auto gathers = [](const StrategyRun& r, const std::string& tag) {
    int n = 0;
    for (const LedgerEntry& e : r.step_entries) n += e.kind == CollKind::kAllGather && e.tag == tag;
    return n;
  };
  RunConfig cfg = tiny_config(Precision::kFp32, 2);
  cfg.model.checkpoint_every = 2;
  // Block b's qkv and first MLP weight by the block's names (GPT-2 h.b.*, Llama layers.b.*).
  const bool llama = cfg.model.arch == ArchKind::kLlama;
  auto qkv = [&](int b) {
    return (llama ? "layers." : "h.") + std::to_string(b) + ".attn.qkv.weight";
  };
  const std::string fc1 = llama ? "layers.1.mlp.gate_up.weight" : "h.1.mlp.fc.weight";
  RunConfig paper = cfg;
  apply_zero_schedule(ZeroSchedule::kPaper, paper.options);
  const StrategyRun z3 = run("zero3", paper, false);
  ASSERT_EQ(z3.status, "ok") << z3.error;
  EXPECT_EQ(gathers(z3, qkv(1)), 3);
  EXPECT_EQ(gathers(z3, fc1), 3);
  EXPECT_EQ(gathers(z3, qkv(0)), 2);
  RunConfig per_tensor = cfg;  // tags name tensors only without the coalesced fetch
  per_tensor.options.zero3_coalesced_fetch = false;
  const StrategyRun shipped = run("zero3", per_tensor, false);
  EXPECT_EQ(gathers(shipped, qkv(1)), 1);
  // coalesced, as shipped: the recompute gathers nothing more than the run without it
  auto gathered = [](const StrategyRun& r) {
    uint64_t b = 0;
    for (const LedgerEntry& e : r.step_entries) b += e.kind == CollKind::kAllGather ? e.payload_bytes : 0;
    return b;
  };
  RunConfig no_ac = cfg;
  no_ac.model.checkpoint_every = 0;
  EXPECT_EQ(gathered(run("zero3", cfg, false)), gathered(run("zero3", no_ac, false)));
  const StrategyRun fs = run("fsdp_full_shard", cfg, false);
  EXPECT_EQ(gathers(fs, "unit2"), 2);
  EXPECT_EQ(gathers(fs, "unit1"), 2);
  const StrategyRun f2 = run("fsdp2", cfg, false);
  EXPECT_EQ(gathers(f2, "group2"), 2);
  if (run_env().topo.partition_size() < 2) return;  // MiCS over partitions of one: no gathers
  RunConfig per_unit = cfg;
  per_unit.options.mics_schedule = MicsSchedule::kPerUnit;
  const StrategyRun mics = run("mics", per_unit, false);
  EXPECT_EQ(gathers(mics, "group2"), 3);
  EXPECT_EQ(gathers(mics, "group1"), 2);
  // MiCS as shipped (ZeRO-3's coordinator, the reuse distance covering the model): the
  // recompute gathers nothing, and nothing is gathered in backward either
  EXPECT_EQ(gathered(run("mics", cfg, false)), gathered(run("mics", no_ac, false)));
}

TEST(BytesShape, HybridMovesFewerInterNodeBytesThanFullShard) {
  const Topology& t = run_env().topo;
  if (t.num_nodes() < 2 || t.ranks_per_node() < 2) GTEST_SKIP() << "needs >= 2 nodes of >= 2 ranks";
  const StrategyRun hy = run("fsdp_hybrid_shard", tiny_config(Precision::kFp32, 2), false);
  const StrategyRun fs = run("fsdp_full_shard", tiny_config(Precision::kFp32, 2), false);
  EXPECT_LT(hy.sent_inter_all, fs.sent_inter_all);
}

TEST(BytesShape, Fsdp2ReshardToTheNodeKeepsTheBackwardGatherInside) {
  const Topology& t = run_env().topo;
  if (t.num_nodes() < 2 || t.ranks_per_node() < 2) GTEST_SKIP() << "needs >= 2 nodes of >= 2 ranks";
  RunConfig cfg = tiny_config(Precision::kFp32, 2);
  const StrategyRun whole = run("fsdp2", cfg, false);
  cfg.options.fsdp2_reshard_after_forward = t.ranks_per_node();
  const StrategyRun node = run("fsdp2", cfg, false);
  ASSERT_EQ(node.status, "ok") << node.error;
  EXPECT_LT(node.sent_inter_all, whole.sent_inter_all);
  uint64_t intra_gathers = 0;
  for (const LedgerEntry& e : node.step_entries)
    intra_gathers += e.kind == CollKind::kAllGather && e.group == GroupKind::kIntra;
  EXPECT_EQ(intra_gathers, uint64_t(cfg.model.n_layer) + 1)
      << "one node all-gather per group in backward, the root's too (an explicit int)";
}


// MiCS as shipped runs ZeRO-3's schedule over the partition: on tiny (one 25 MiB bucket, every
// tensor within the reuse distance) a step is the first module's gather, the prefetch of the
// rest, one reduce-scatter over the partition and one all-reduce across replicas (none with a
// single replica), 4 collectives; nothing is gathered in backward. The per-unit schedule gathers
// every unit but the root twice and reduces each unit on its own.
TEST(BytesShape, MicsShippedIsZero3OverThePartitionWithOneReplicaAllReduce) {
  const Topology& t = run_env().topo;
  if (t.partition_size() < 2) GTEST_SKIP() << "MiCS over partitions of one: no gathers";
  auto count = [](const StrategyRun& r, CollKind k) {
    uint64_t n = 0;
    for (const LedgerEntry& e : r.step_entries) n += e.kind == k;
    return n;
  };
  RunConfig cfg = tiny_config(Precision::kFp32, 2);
  const StrategyRun shipped = run("mics", cfg, false);
  ASSERT_EQ(shipped.status, "ok") << shipped.error;
  const uint64_t replicas = uint64_t(t.world_size() / t.partition_size());
  EXPECT_EQ(count(shipped, CollKind::kAllGather), 2u);
  EXPECT_EQ(count(shipped, CollKind::kReduceScatter), 1u);
  EXPECT_EQ(count(shipped, CollKind::kAllReduce), replicas > 1 ? 1u : 0u);
  EXPECT_EQ(shipped.step_entries.size(), replicas > 1 ? 4u : 3u);
  cfg.options.mics_schedule = MicsSchedule::kPerUnit;
  const StrategyRun unit = run("mics", cfg, false);
  const uint64_t units = uint64_t(cfg.model.n_layer) + 1;
  EXPECT_EQ(count(unit, CollKind::kAllGather), 2 * units - 1);
  EXPECT_EQ(count(unit, CollKind::kReduceScatter), units);
  EXPECT_EQ(count(unit, CollKind::kAllReduce), replicas > 1 ? units : 0u);
}

}  // namespace
}  // namespace sb::testing
