// Memory: the tracker's model-state bytes per rank (params + grads + optimizer at rest) equal
// the ZeRO paper's §5 forms of tests/closed_forms.h exactly (with --model=odd at a world of 3:
// every buffer padded); peak ordering on `small`; the wrap-policy pitfall; and one strategy's
// failure (the per-rank memory limit) stays that strategy's.
#include <gtest/gtest.h>

#include <map>

#include "strategies/buckets.h"
#include "harness/predict/model_shape.h"
#include "tests/closed_forms.h"
#include "harness/model/checkpointing.h"
#include "tests/mpi/run_fixture.h"

namespace sb::testing {
namespace {

using closed_forms::round_up;

class ModelStateTest : public ::testing::TestWithParam<std::tuple<std::string, Precision>> {};

TEST_P(ModelStateTest, EqualsZeroPaperForm) {
  const auto& [s, p] = GetParam();
  const RunConfig cfg = tiny_config(p, 1);
  const StrategyRun r = run(s, cfg, false);
  ASSERT_EQ(r.status, "ok") << r.error;
  const Topology& topo = run_env().topo;
  const closed_forms::ModelState e = closed_forms::expected_state(
      s, make_layout(cfg.model), p, 0, topo.world_size(), topo.ranks_per_node(),
      topo.partition_size());
  EXPECT_EQ(r.model_state_params, e.params);
  EXPECT_EQ(r.model_state_grads, e.grads);
  EXPECT_EQ(r.model_state_optimizer, e.optimizer);
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, ModelStateTest,
                         ::testing::Combine(::testing::ValuesIn(strategy_names()),
                                            ::testing::Values(Precision::kFp32, Precision::kBf16Mixed)),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) == Precision::kFp32 ? "_fp32" : "_bf16");
                         });

TEST(Peak, OrdersDdpZero1Zero2Zero3OnSmall) {
  if (run_env().topo.world_size() < 4) GTEST_SKIP() << "the ordering needs sharding over >= 4 ranks";
  RunConfig cfg = tiny_config(Precision::kFp32, 1);
  cfg.model = parse_model("small");
  cfg.batch_per_rank = 1;
  cfg.options.bucket_mb = 1;  // ZeRO-2's in-flight buckets, not the whole grad, at any moment
  cfg.options.overlap = false;  // buffers are freed at fixed points, so the peak is repeatable
  std::vector<uint64_t> peaks;
  for (const char* s : {"ddp", "zero1", "zero2", "zero3"}) {
    const StrategyRun r = run(s, cfg, false);
    ASSERT_EQ(r.status, "ok") << r.error;
    peaks.push_back(r.peak_bytes);
  }
  EXPECT_GT(peaks[0], peaks[1]);
  EXPECT_GT(peaks[1], peaks[2]);
  EXPECT_GT(peaks[2], peaks[3]);
}

// Activation checkpointing's activations are allocated once (the kept layers, the block
// outputs, one recompute slot), so they shift the whole memory curve: where a strategy's own
// buffers follow the same timeline with and without it (DDP, ZeRO-2; FSDP and FSDP2, whose
// recompute runs inside the backward gather), the peak drops by exactly the activation bytes
// the closed form says it drops (harness/predict/model_shape.cc activation_bytes), fp32 and
// bf16-mixed activations, naive and fused attention; for block and op checkpointing and for
// the chunked loss (its logits and one fp32 chunk instead of the full fp32 logits and
// probabilities, allocated once too).
TEST(Peak, ActivationCheckpointingLowersThePeakByTheActivationsItDrops) {
  for (bool bf16 : {false, true}) {
    RunConfig cfg = tiny_config(bf16 ? Precision::kBf16Mixed : Precision::kFp32, 2);
    // the block of --model (mpi_run_llama: the Llama block's activations)
    cfg.model = parse_model("4,32,4,16,64", cfg.model.arch == ArchKind::kLlama ? "llama" : "");
    cfg.model.attention = bf16 ? AttentionKind::kFused : AttentionKind::kNaive;
    cfg.options.overlap = false;  // buffers are freed at fixed points, so the peak is repeatable
    for (auto [every, loss] : {std::pair{1, CrossEntropyKind::kFull},
                               std::pair{kCheckpointOp, CrossEntropyKind::kFull},
                               std::pair{0, CrossEntropyKind::kChunked}}) {
      RunConfig ac = cfg;
      ac.model.checkpoint_every = every;
      ac.model.cross_entropy = loss;
      const uint64_t dropped = activation_bytes(cfg.model, cfg.batch_per_rank, bf16) -
                               activation_bytes(ac.model, ac.batch_per_rank, bf16);
      EXPECT_GT(dropped, 0u);
      const std::string at = activation_checkpointing_name(every) + " " +
                             cross_entropy_name(loss) + (bf16 ? " bf16" : " fp32");
      for (const char* s : {"ddp", "zero2", "fsdp_full_shard", "fsdp2"}) {
        const StrategyRun without = run(s, cfg, false), with = run(s, ac, false);
        ASSERT_EQ(with.status, "ok") << s << ": " << with.error;
        EXPECT_EQ(without.peak_bytes - with.peak_bytes, dropped) << s << " " << at;
      }
    }
  }
}

TEST(Peak, WrapModelHoldsTheWholeModelWrapBlockAboutOneBlock) {
  if (run_env().topo.world_size() < 2) GTEST_SKIP() << "needs sharding";
  RunConfig cfg = tiny_config(Precision::kFp32, 1);
  cfg.model = parse_model("6,32,4,16,64");  // enough blocks that one is much less than all
  const ModelLayout l = make_layout(cfg.model);
  const uint64_t N = run_env().topo.world_size();
  cfg.options.wrap = "model";
  const StrategyRun whole = run("fsdp_full_shard", cfg, false);
  cfg.options.wrap = "block";
  const StrategyRun block = run("fsdp_full_shard", cfg, false);
  ASSERT_EQ(whole.status, "ok");
  ASSERT_EQ(block.status, "ok");
  const uint64_t gathered_whole = whole.breakdown_at_peak[int(MemCategory::kGatheredParams)];
  const uint64_t gathered_block = block.breakdown_at_peak[int(MemCategory::kGatheredParams)];
  EXPECT_EQ(gathered_whole, 4 * round_up(l.num_params(), N)) << "the unsharded model, whole";
  // root (embeddings + head) + the block being computed + at most one prefetched block
  const uint64_t C = cfg.model.n_embd, blockp = 12 * C * C + 13 * C;
  const uint64_t root = l.num_params() - cfg.model.n_layer * blockp;
  EXPECT_LE(gathered_block, 4 * (round_up(root, N) + 2 * round_up(blockp, N)));
  EXPECT_LT(gathered_block, gathered_whole);
}

TEST(Failure, MemoryLimitFailsOneStrategyNotTheNext) {
  RunConfig cfg = tiny_config(Precision::kFp32, 1);
  // The strategies with the largest and the smallest peak at this shape, run without a limit;
  // then a limit between the two: the first must end "oom", the second still run.
  std::string biggest, smallest;
  uint64_t max_peak = 0, min_peak = UINT64_MAX;
  for (const auto& s : strategy_names()) {
    const StrategyRun r = run(s, cfg, false);
    ASSERT_EQ(r.status, "ok") << r.error;
    if (r.peak_bytes > max_peak) max_peak = r.peak_bytes, biggest = s;
    if (r.peak_bytes < min_peak) min_peak = r.peak_bytes, smallest = s;
  }
  ASSERT_GT(max_peak, min_peak);
  // The tracker's peak is of the steady state; setup allocates no more than a step holds.
  cfg.mem_limit_gb = double(max_peak + min_peak) / 2 / double(1ull << 30);
  const StrategyRun big = run(biggest, cfg, false);
  const StrategyRun small = run(smallest, cfg, false);
  EXPECT_EQ(big.status, "oom") << biggest;
  EXPECT_NE(big.error.find("out of memory"), std::string::npos) << big.error;
  EXPECT_NE(big.error.find("params="), std::string::npos) << "the breakdown: " << big.error;
  EXPECT_EQ(small.status, "ok") << smallest << ": " << small.error;
}

}  // namespace
}  // namespace sb::testing
