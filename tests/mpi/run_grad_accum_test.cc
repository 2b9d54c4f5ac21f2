// Gradient accumulation (--grad-accum K) of the FSDP strategies as FullyShardedDataParallel
// .no_sync() does it (torch 1.13.1; FSDP2: set_requires_gradient_sync(False)), of ZeRO-1
// (reduces at the accumulation boundary), of MiCS (DeepSpeed's ZeRO-3 way) and of ZeRO-2/3
// (reduce every micro-batch into the partitions; below):
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

// ZeRO-2 and ZeRO-3 reduce every micro-batch (stage_1_and_2.py
// reduce_ready_partitions_and_remove_grads reduces when `partition_gradients or
// is_gradient_accumulation_boundary()`; stage3.py partition_grads) and sum the reduced
// partitions. Closed forms, from K = 1's run of the same schedule: the gradient reductions
// (all-reduces as shipped, reduce-scatters as the paper) K times over, in bytes and count; the
// parameter all-gathers once (ZeRO-2: after the step) or K times (ZeRO-3: each micro-batch's
// forward and backward gather as a step does); the grads at rest only the partitions; and,
// serially in fp32, the peak K = 1's (nothing outlives a micro-batch but the partitions) except
// ZeRO-2's reduce-scatter, which lands a later micro-batch's chunk beside the partition (+ one
// bucket chunk, tiny being one bucket).
class ZeroGradAccumEveryMicroBatch
    : public ::testing::TestWithParam<std::tuple<std::string, ZeroSchedule, int>> {};

TEST_P(ZeroGradAccumEveryMicroBatch, TrainsLikeTheFullBatchReference) {
  const auto& [s, schedule, K] = GetParam();
  const Reference ref = reference_run(tiny_config(), global_batch() * K, 3);
  RunConfig c = tiny_config(Precision::kFp32, 3);
  apply_zero_schedule(schedule, c.options);
  c.options.grad_accum = K;
  const StrategyRun r = run(s, c);
  ASSERT_EQ(r.status, "ok") << r.error;
  EXPECT_LT(rel_norm_diff(r.params, ref.params), 1e-5);
  for (size_t i = 0; i < ref.loss.size(); ++i)
    EXPECT_NEAR(r.loss[i], ref.loss[i], 1e-5 * std::fabs(ref.loss[i])) << "step " << i;
}

TEST_P(ZeroGradAccumEveryMicroBatch, BytesAndMemoryInClosedForm) {
  const auto& [s, schedule, K] = GetParam();
  RunConfig c = tiny_config(Precision::kFp32, 1);
  c.warmup = 1;  // ZeRO-3's first forward/backward records the trace, releasing every gather
  apply_zero_schedule(schedule, c.options);
  c.options.overlap = false;
  c.options.grad_accum = K;
  const StrategyRun r = run(s, c, false);
  ASSERT_EQ(r.status, "ok") << r.error;
  c.options.grad_accum = 1;
  const StrategyRun one = run(s, c, false);
  ASSERT_EQ(one.status, "ok") << one.error;
  std::array<uint64_t, kNumCollKinds> bk{}, ck{}, b1{}, c1{};
  for (const LedgerEntry& l : r.step_entries) bk[int(l.kind)] += l.payload_bytes, ++ck[int(l.kind)];
  for (const LedgerEntry& l : one.step_entries) b1[int(l.kind)] += l.payload_bytes, ++c1[int(l.kind)];
  for (CollKind k : {CollKind::kReduceScatter, CollKind::kAllReduce}) {
    EXPECT_EQ(bk[int(k)], uint64_t(K) * b1[int(k)]) << coll_name(k);
    EXPECT_EQ(ck[int(k)], uint64_t(K) * c1[int(k)]) << coll_name(k);
  }
  const uint64_t gathers = s == "zero2" ? 1 : uint64_t(K);
  EXPECT_EQ(bk[int(CollKind::kAllGather)], gathers * b1[int(CollKind::kAllGather)]);
  EXPECT_EQ(ck[int(CollKind::kAllGather)], gathers * c1[int(CollKind::kAllGather)]);
  EXPECT_EQ(r.model_state_grads, one.model_state_grads) << "at rest only the partitions";
  const uint64_t N = run_env().topo.world_size();
  const bool beside = s == "zero2" && schedule == ZeroSchedule::kPaper;
  const uint64_t chunk = 4 * closed_forms::round_up(make_layout(c.model).num_params(), N) / N;
  if (beside)
    EXPECT_LE(r.peak_bytes, one.peak_bytes + chunk);
  else
    EXPECT_EQ(r.peak_bytes, one.peak_bytes);
}

INSTANTIATE_TEST_SUITE_P(
    Zero23, ZeroGradAccumEveryMicroBatch,
    ::testing::Combine(::testing::Values("zero2", "zero3"),
                       ::testing::Values(ZeroSchedule::kShipped, ZeroSchedule::kPaper),
                       ::testing::Values(2, 3)),
    [](const auto& info) {
      return std::get<0>(info.param) +
             (std::get<1>(info.param) == ZeroSchedule::kShipped ? "_shipped" : "_paper") + "_K" +
             std::to_string(std::get<2>(info.param));
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
