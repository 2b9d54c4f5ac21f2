// Gradient accumulation (--grad-accum K) of the FSDP strategies as FullyShardedDataParallel
// .no_sync() does it (torch 1.13.1; FSDP2: set_requires_gradient_sync(False)), of ZeRO-1
// (reduces at the accumulation boundary) and of MiCS (DeepSpeed's ZeRO-3 way):
// parity with a 1-rank full-batch run on the same global batch (N·b·K samples) for K = 2, 3; as
// many reduce-scatters per optimizer step as at K = 1; and the unsharded gradients kept between
// micro-batches counted: Ψ_pad·b_g of grads beside the shards.
#include <gtest/gtest.h>

#include <array>
#include <utility>

#include "tests/closed_forms.h"
#include "tests/mpi/run_fixture.h"

namespace sb::testing {
namespace {

class GradAccumNoSync : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(GradAccumNoSync, NoSyncTrainsLikeTheFullBatchReference) {
  const auto& [s, K] = GetParam();
  const Reference ref = reference_run(tiny_config(), global_batch() * K, 3);
  RunConfig c = tiny_config(Precision::kFp32, 3);
  c.options.grad_accum = K;
  const StrategyRun r = run(s, c);
  ASSERT_EQ(r.status, "ok") << r.error;
  EXPECT_LT(rel_norm_diff(r.params, ref.params), 1e-5);
  for (size_t i = 0; i < ref.loss.size(); ++i)
    EXPECT_NEAR(r.loss[i], ref.loss[i], 1e-5 * std::fabs(ref.loss[i])) << "step " << i;
  // Per optimizer step: the reductions of K = 1 once, FSDP's all-gathers K times (every
  // micro-batch gathers and reshards as usual), payload bytes of each kind exactly.
  c.options.grad_accum = 1;
  const StrategyRun one = run(s, c, false);
  ASSERT_EQ(one.status, "ok") << one.error;
  const auto by_kind = [](const StrategyRun& x) {
    std::array<uint64_t, kNumCollKinds> bytes{}, count{};
    for (const LedgerEntry& l : x.step_entries) {
      bytes[int(l.kind)] += l.payload_bytes;
      count[int(l.kind)] += 1;
    }
    return std::pair{bytes, count};
  };
  const auto [bk, ck] = by_kind(r);
  const auto [b1, c1] = by_kind(one);
  for (CollKind k : {CollKind::kReduceScatter, CollKind::kAllReduce}) {
    EXPECT_EQ(bk[int(k)], b1[int(k)]) << coll_name(k);
    EXPECT_EQ(ck[int(k)], c1[int(k)]) << coll_name(k);
  }
  const uint64_t gathers = s == "zero1" ? 1 : uint64_t(K);  // ZeRO-1 gathers after the step
  EXPECT_EQ(bk[int(CollKind::kAllGather)], gathers * b1[int(CollKind::kAllGather)]);
}

// MiCS as DeepSpeed's ZeRO-3 accumulates: a reduce-scatter over the partition every micro-batch
// (added into the shard), the all-reduce across replicas only at the accumulation boundary
// (mics.py allreduce_mics_shard_grads); the all-gathers every micro-batch.
class MicsGradAccum : public ::testing::TestWithParam<int> {};

TEST_P(MicsGradAccum, ReduceScattersEveryMicroBatchAllReducesOnce) {
  const int K = GetParam();
  const Reference ref = reference_run(tiny_config(), global_batch() * K, 3);
  RunConfig c = tiny_config(Precision::kFp32, 3);
  c.options.grad_accum = K;
  const StrategyRun r = run("mics", c);
  ASSERT_EQ(r.status, "ok") << r.error;
  EXPECT_LT(rel_norm_diff(r.params, ref.params), 1e-5);
  c.options.grad_accum = 1;
  const StrategyRun one = run("mics", c, false);
  ASSERT_EQ(one.status, "ok") << one.error;
  std::array<uint64_t, kNumCollKinds> nk{}, n1{};
  for (const LedgerEntry& l : r.step_entries) ++nk[int(l.kind)];
  for (const LedgerEntry& l : one.step_entries) ++n1[int(l.kind)];
  EXPECT_EQ(nk[int(CollKind::kReduceScatter)], uint64_t(K) * n1[int(CollKind::kReduceScatter)]);
  EXPECT_EQ(nk[int(CollKind::kAllGather)], uint64_t(K) * n1[int(CollKind::kAllGather)]);
  EXPECT_EQ(nk[int(CollKind::kAllReduce)], n1[int(CollKind::kAllReduce)]);
}

INSTANTIATE_TEST_SUITE_P(Mics, MicsGradAccum, ::testing::Values(2, 3));

// FSDP without no_sync: every micro-batch reduce-scatters and the shard accumulates the sums, so
// the reductions (and gathers) are K times K = 1's, and no unsharded gradient outlives its unit.
class FsdpGradAccumEveryMicroBatch : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(FsdpGradAccumEveryMicroBatch, TrainsLikeTheFullBatchReference) {
  const auto& [s, K] = GetParam();
  const Reference ref = reference_run(tiny_config(), global_batch() * K, 3);
  RunConfig c = tiny_config(Precision::kFp32, 3);
  c.options.grad_accum = K;
  c.options.fsdp_no_sync = false;
  const StrategyRun r = run(s, c);
  ASSERT_EQ(r.status, "ok") << r.error;
  EXPECT_LT(rel_norm_diff(r.params, ref.params), 1e-5);
  c.options.grad_accum = 1;
  const StrategyRun one = run(s, c, false);
  ASSERT_EQ(one.status, "ok") << one.error;
  EXPECT_EQ(r.payload_bytes, uint64_t(K) * one.payload_bytes);
  EXPECT_EQ(r.step_entries.size(), size_t(K) * one.step_entries.size());
}

INSTANTIATE_TEST_SUITE_P(
    AllFsdp, FsdpGradAccumEveryMicroBatch,
    ::testing::Combine(::testing::Values("fsdp_full_shard", "fsdp_shard_grad_op",
                                         "fsdp_hybrid_shard", "fsdp_hybrid_shard_zero2"),
                       ::testing::Values(2, 3)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_K" + std::to_string(std::get<1>(info.param));
    });

INSTANTIATE_TEST_SUITE_P(
    FsdpZero1, GradAccumNoSync,
    ::testing::Combine(::testing::Values("fsdp_full_shard", "fsdp_shard_grad_op",
                                         "fsdp_hybrid_shard", "fsdp_hybrid_shard_zero2", "zero1",
                                         "fsdp2", "fsdp2_hsdp"),
                       ::testing::Values(2, 3)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_K" + std::to_string(std::get<1>(info.param));
    });

// no_sync keeps every unit's unsharded gradient from the first micro-batch's backward to the
// last one's reduce-scatter: at the peak (the last micro-batch's forward/backward boundary,
// activations whole) the grads are every unit's full flat gradient, Ψ_pad·b_g, plus the shards.
// FSDP2 under set_requires_gradient_sync(False) the same, over its per-parameter Ψ_pad.
class FsdpGradAccumMemory : public ::testing::TestWithParam<std::string> {};

TEST_P(FsdpGradAccumMemory, UnshardedGradsAreKeptUntilTheLastMicroBatch) {
  if (run_env().topo.world_size() < 2) GTEST_SKIP() << "needs sharding";
  RunConfig c = tiny_config(Precision::kFp32, 1);
  c.options.overlap = false;
  c.options.grad_accum = 2;
  const StrategyRun r = run(GetParam(), c, false);
  ASSERT_EQ(r.status, "ok") << r.error;
  const uint64_t N = run_env().topo.world_size();
  const ModelLayout l = make_layout(c.model);
  const uint64_t pad = GetParam() == "fsdp2" ? closed_forms::fsdp2_padded(l, N).first
                                             : closed_forms::fsdp_padded(l, N).first;
  EXPECT_EQ(r.breakdown_at_peak[int(MemCategory::kGrads)], 4 * pad + 4 * pad / N);
  EXPECT_EQ(r.model_state_grads, 4 * pad / N) << "at rest only the shards";
}

INSTANTIATE_TEST_SUITE_P(FsdpFsdp2, FsdpGradAccumMemory,
                         ::testing::Values("fsdp_full_shard", "fsdp2"));

}  // namespace
}  // namespace sb::testing
