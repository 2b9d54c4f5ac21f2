// FSDP2 as PyTorch ships it (torch/distributed/fsdp/_fully_shard/): reshard_after_forward None
// against an explicit True (the root's backward all-gather), and MixedPrecisionPolicy's
// reduce_dtype (torchtitan's bf16 parameters with fp32 reductions): per-collective payloads,
// collective counts, model-state bytes and the training it still does. The byte totals of both
// are in the closed-form grid (run_bytes_test.cc).
#include <gtest/gtest.h>

#include <cmath>

#include "tests/closed_forms.h"
#include "tests/mpi/run_fixture.h"

namespace sb::testing {
namespace {

// reshard_after_forward=True, given explicitly, reshards the root as well (fully_shard's
// auto_reshard_after_forward is False): its group is all-gathered a second time, in backward,
// over the shard group; the default (None) gathers it once. Nothing else changes.
TEST(BytesShape, Fsdp2ExplicitTrueGathersTheRootAgainInBackward) {
  const Topology& t = run_env().topo;
  if (t.world_size() < 2) GTEST_SKIP() << "needs sharding";
  auto root_gathers = [](const StrategyRun& r) {
    uint64_t n = 0, bytes = 0;
    for (const LedgerEntry& e : r.step_entries)
      if (e.kind == CollKind::kAllGather && e.tag == "group0") ++n, bytes += e.payload_bytes;
    return std::pair{n, bytes};
  };
  RunConfig cfg = tiny_config(Precision::kFp32, 2);
  const StrategyRun autos = run("fsdp2", cfg, false);
  cfg.options.fsdp2_reshard_after_forward = kFsdp2ReshardTrue;
  const StrategyRun explicit_true = run("fsdp2", cfg, false);
  ASSERT_EQ(explicit_true.status, "ok") << explicit_true.error;
  const auto [n_auto, b_auto] = root_gathers(autos);
  const auto [n_true, b_true] = root_gathers(explicit_true);
  EXPECT_EQ(n_auto, 1u);
  EXPECT_EQ(n_true, 2u);
  EXPECT_EQ(b_true, 2 * b_auto);
  EXPECT_EQ(explicit_true.step_entries.size(), autos.step_entries.size() + 1);
}


// Payload bytes and count of one collective kind in a run's step.
std::pair<uint64_t, uint64_t> of_kind(const StrategyRun& r, CollKind k) {
  uint64_t n = 0, bytes = 0;
  for (const LedgerEntry& e : r.step_entries)
    if (e.kind == k) ++n, bytes += e.payload_bytes;
  return {n, bytes};
}

// reduce_dtype=fp32 under bf16 parameters: the same number of reduce-scatters, each twice the
// bytes (foreach_reduce casts the grads to fp32 first); the all-gathers unchanged (bf16); the
// sharded grads held in fp32, twice the bf16 model-state bytes, as the closed form says.
TEST(Fsdp2MixedPrecision, ReduceFp32DoublesTheReduceScatterAndKeepsFp32Grads) {
  if (run_env().topo.world_size() < 2) GTEST_SKIP() << "needs sharding";
  for (const char* s : {"fsdp2", "fsdp2_hsdp"}) {
    RunConfig cfg = tiny_config(Precision::kBf16Mixed, 2);
    const StrategyRun bf16 = run(s, cfg, false);
    cfg.options.fsdp2_reduce_fp32 = true;
    const StrategyRun fp32 = run(s, cfg, false);
    ASSERT_EQ(fp32.status, "ok") << fp32.error;
    const auto [n16, b16] = of_kind(bf16, CollKind::kReduceScatter);
    const auto [n32, b32] = of_kind(fp32, CollKind::kReduceScatter);
    EXPECT_EQ(n32, n16) << s;
    EXPECT_GT(n16, 0u) << s;
    EXPECT_EQ(b32, 2 * b16) << s;
    EXPECT_EQ(of_kind(fp32, CollKind::kAllGather), of_kind(bf16, CollKind::kAllGather)) << s;
    EXPECT_EQ(fp32.model_state_grads, 2 * bf16.model_state_grads) << s;
    const Topology& t = run_env().topo;
    const closed_forms::ModelState e = closed_forms::expected_state(
        s, make_layout(cfg.model), Precision::kBf16Mixed, 0, t.world_size(), t.ranks_per_node(),
        0, false, UINT64_MAX, true);
    EXPECT_EQ(fp32.model_state_grads, e.grads) << s;
    EXPECT_EQ(fp32.model_state_params, e.params) << s;
  }
}

// The fp32 reduction still trains the model: its losses follow the 1-rank fp32 reference within
// the bf16-mixed allowance (run_parity_test.cc), and under gradient accumulation too, where the
// unsharded grads are kept in fp32 between micro-batches (to_accumulated_grad_if_needed).
TEST(Fsdp2MixedPrecision, ReduceFp32TrainsLikeTheReference) {
  RunConfig cfg = tiny_config(Precision::kBf16Mixed, 3);
  cfg.options.fsdp2_reduce_fp32 = true;
  RunConfig ref_cfg = tiny_config(Precision::kFp32, 3);
  const StrategyRun ref = run("ddp", ref_cfg, false);
  for (int accum : {1, 2}) {
    cfg.options.grad_accum = accum;
    ref_cfg.options.grad_accum = accum;
    const StrategyRun want = accum == 1 ? ref : run("ddp", ref_cfg, false);
    const StrategyRun r = run("fsdp2", cfg, false);
    ASSERT_EQ(r.status, "ok") << r.error;
    ASSERT_EQ(r.loss.size(), want.loss.size());
    for (size_t i = 0; i < r.loss.size(); ++i)
      EXPECT_NEAR(r.loss[i], want.loss[i], 2e-2 * std::fabs(want.loss[i]))
          << "accum " << accum << " step " << i;
  }
}

}  // namespace
}  // namespace sb::testing
