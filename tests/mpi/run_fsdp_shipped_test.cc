// FSDP's shipped knobs beyond the sharding strategy: use_orig_params' 16-byte alignment of every
// tensor inside the FlatParameter (bytes, model state and padding against the closed form, at
// worlds 1-4 and 3 with odd shapes, and parity with the 1-rank run), and limit_all_gathers as
// the _FreeEventQueue (it never changes what is gathered, and on the CPU device, whose free has
// happened by the time it is recorded, the peak is that of no limiter).
#include <gtest/gtest.h>

#include "tests/closed_forms.h"
#include "tests/mpi/run_fixture.h"

namespace sb::testing {
namespace {

struct OrigCase {
  std::string strategy;
  Precision precision;
};

class UseOrigParams : public ::testing::TestWithParam<OrigCase> {};

// Closed form (torch >= 2.0 _flat_param.py, FlatParamHandle._init_flat_param_and_metadata):
// align = 16 / b_p elements; a unit's length rounds up to align before each of its tensors, then
// to the shard group S: Ψ_pad(align) = fsdp_padded(l, S, align). With it, as without:
//   model state per rank: params b_p·Ψ_pad/S, grads b_g·Ψ_pad/S, optimizer K·Ψ_pad/S;
//   per step, summed over ranks, over the shard group's ring: each rank sends (S-1)/S of every
//   all-gather (2Ψ_pad - root for FULL_SHARD: the root is not resharded after forward) and
//   reduce-scatter; HYBRID adds the all-reduce of the shard across the M nodes.
TEST_P(UseOrigParams, AlignedFlatParamMatchesTheClosedFormAndTrainsLikeTheReference) {
  const OrigCase& c = GetParam();
  RunConfig cfg = tiny_config(c.precision, 2);
  cfg.options.fsdp_use_orig_params = true;
  const Topology& topo = run_env().topo;
  const uint64_t N = topo.world_size(), G = topo.ranks_per_node(), M = N / G;
  const bool hybrid = c.strategy == "fsdp_hybrid_shard";
  const uint64_t S = hybrid ? G : N;
  const ModelLayout l = make_layout(cfg.model);
  const uint64_t bp = uint64_t(closed_forms::param_bytes(c.precision)), bg = bp;
  const auto [pad, root] = closed_forms::fsdp_padded(l, S, 16 / bp);
  const StrategyRun r = run(c.strategy, cfg, c.precision == Precision::kFp32);
  ASSERT_EQ(r.status, "ok") << r.error;
  EXPECT_EQ(r.padded_params, pad);
  const uint64_t K = c.precision == Precision::kFp32 ? 8 : 12;
  EXPECT_EQ(r.model_state_params, bp * pad / S);
  EXPECT_EQ(r.model_state_grads, bg * pad / S);
  EXPECT_EQ(r.model_state_optimizer, K * pad / S);
  const double per_rank = double(S - 1) / double(S) * double((2 * pad - root) * bp + pad * bg);
  if (!hybrid) {  // the world ring: M of its N hops cross nodes (none on one node)
    const double inter_hops = M > 1 ? double(M) : 0;
    EXPECT_EQ(double(r.sent_intra_all), (double(N) - inter_hops) * per_rank);
    EXPECT_EQ(double(r.sent_inter_all), inter_hops * per_rank);
  } else {  // shard rings inside each node; the shard's all-reduce ring across nodes
    EXPECT_EQ(double(r.sent_intra_all), double(N) * per_rank);
    EXPECT_EQ(double(r.sent_inter_all), 2.0 * double(M - 1) * double(pad * bg));
  }
  // without the alignment the flat parameter is smaller unless every tensor is aligned already
  EXPECT_GE(pad, closed_forms::fsdp_padded(l, S).first);
  if (c.precision == Precision::kFp32) {
    EXPECT_LT(rel_norm_diff(r.params, reference_run(cfg, global_batch(), 2).params), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(
    FullAndHybrid, UseOrigParams,
    ::testing::Values(OrigCase{"fsdp_full_shard", Precision::kFp32},
                      OrigCase{"fsdp_full_shard", Precision::kBf16Mixed},
                      OrigCase{"fsdp_hybrid_shard", Precision::kFp32}),
    [](const auto& info) {
      return info.param.strategy +
             (info.param.precision == Precision::kFp32 ? "_fp32" : "_bf16");
    });

// limit_all_gathers waits on reshards' free events, never on an all-gather: the same
// collectives, bytes and parameters as without it; with overlap off (frees at fixed points)
// the same peak and breakdown, as the CPU device has freed by the time it records the event.
TEST(LimitAllGathers, FreeEventQueueChangesNeitherTrafficNorPeakOnTheCpu) {
  for (const char* s : {"fsdp_full_shard", "fsdp_shard_grad_op"}) {
    RunConfig c = tiny_config(Precision::kFp32, 2);
    c.options.overlap = false;
    c.options.forward_prefetch = true;
    c.options.limit_all_gathers = true;
    const StrategyRun on = run(s, c, false);
    c.options.limit_all_gathers = false;
    const StrategyRun off = run(s, c, false);
    ASSERT_EQ(on.status, "ok") << on.error;
    ASSERT_EQ(off.status, "ok") << off.error;
    EXPECT_EQ(on.step_entries.size(), off.step_entries.size()) << s;
    EXPECT_EQ(on.payload_bytes, off.payload_bytes) << s;
    EXPECT_EQ(on.peak_bytes, off.peak_bytes) << s;
    for (int k = 0; k < kNumMemCategories; ++k)
      EXPECT_EQ(on.breakdown_at_peak[k], off.breakdown_at_peak[k]) << s << " " << k;
    EXPECT_EQ(on.param_checksum, off.param_checksum) << s;
  }
}

}  // namespace
}  // namespace sb::testing
