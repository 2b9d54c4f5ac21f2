// The parity gate: every strategy, at this job's world size and node shape, trains `tiny` for
// 5 steps on the same global batch and must match an independent 1-rank full-batch run.
// fp32 tolerance 1e-5 relative: the only differences are the order of floating-point sums
// (per-rank partial gradients summed by the ring vs one GEMM over the whole batch), ~1e-7
// relative per gradient; Adam normalises updates so they do not grow over 5 steps.
// bf16-mixed tolerance: params and grads are rounded to bf16 (8 bits of mantissa, relative
// step 2^-8 = 0.4 %), and each ring hop rounds the partial sum again, so a rank-count-dependent
// 1-ulp difference in a gradient or a parameter is expected: 2e-2 on the loss and 2e-2 norm-
// relative on the parameters, against both the fp32 reference and bf16 ddp at the same shape.
#include <gtest/gtest.h>

#include "tests/mpi/run_fixture.h"

namespace sb::testing {
namespace {

class Parity : public ::testing::TestWithParam<std::string> {};

const Reference& fp32_reference() {
  static const Reference ref = reference_run(tiny_config(), kGlobalBatch, 5);
  return ref;
}

TEST_P(Parity, Fp32MatchesOneRankReference) {
  const Reference& ref = fp32_reference();
  const StrategyRun r = run(GetParam(), tiny_config());
  ASSERT_EQ(r.status, "ok") << r.error;
  ASSERT_EQ(r.loss.size(), ref.loss.size());
  for (size_t s = 0; s < ref.loss.size(); ++s)
    EXPECT_NEAR(r.loss[s], ref.loss[s], 1e-5 * std::fabs(ref.loss[s])) << "step " << s;
  EXPECT_LT(rel_norm_diff(r.params, ref.params), 1e-5);
  EXPECT_LT(max_abs_diff(r.params, ref.params), 1e-5 * 1.0) << "largest elementwise difference";
  EXPECT_LT(ref.loss.back(), ref.loss.front()) << "the reference should learn";
}

TEST_P(Parity, Bf16MixedMatchesWithinBf16Tolerance) {
  const Reference& ref = fp32_reference();
  const StrategyRun r = run(GetParam(), tiny_config(Precision::kBf16Mixed));
  ASSERT_EQ(r.status, "ok") << r.error;
  static const StrategyRun ddp = run("ddp", tiny_config(Precision::kBf16Mixed));
  for (size_t s = 0; s < ref.loss.size(); ++s) {
    EXPECT_NEAR(r.loss[s], ref.loss[s], 2e-2 * std::fabs(ref.loss[s])) << "step " << s;
    EXPECT_NEAR(r.loss[s], ddp.loss[s], 2e-2 * std::fabs(ddp.loss[s])) << "step " << s;
  }
  EXPECT_LT(rel_norm_diff(r.params, ref.params), 2e-2);
  EXPECT_LT(rel_norm_diff(r.params, ddp.params), 2e-2);
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, Parity, ::testing::ValuesIn(strategy_names()),
                         [](const auto& info) { return info.param; });

TEST(ParityKnobs, OverlapPrefetchAndWrapDoNotChangeTheMath) {
  const Reference& ref = fp32_reference();
  struct Variant { const char* strategy; const char* what; std::function<void(RunConfig&)> set; };
  const std::vector<Variant> variants = {
      {"ddp", "overlap off, 1 KiB buckets", [](RunConfig& c) { c.options.overlap = false; c.options.bucket_mb = 1.0 / 1024; }},
      {"zero2", "small buckets", [](RunConfig& c) { c.options.bucket_mb = 0.01; }},
      {"zero3", "persistence 100, prefetch 1000", [](RunConfig& c) { c.options.persist_elements = 100; c.options.prefetch_elements = 1000; }},
      {"fsdp_full_shard", "wrap model", [](RunConfig& c) { c.options.wrap = "model"; }},
      {"fsdp_full_shard", "every-2, post prefetch, fwd prefetch", [](RunConfig& c) { c.options.wrap = "every-2"; c.options.backward_prefetch = BackwardPrefetch::kPost; c.options.forward_prefetch = true; }},
      {"fsdp_hybrid_shard", "no prefetch, no limiter", [](RunConfig& c) { c.options.backward_prefetch = BackwardPrefetch::kNone; c.options.limit_all_gathers = false; }},
  };
  for (const Variant& v : variants) {
    RunConfig c = tiny_config();
    v.set(c);
    const StrategyRun r = run(v.strategy, c);
    ASSERT_EQ(r.status, "ok") << v.strategy << " " << v.what << ": " << r.error;
    EXPECT_LT(rel_norm_diff(r.params, ref.params), 1e-5) << v.strategy << " " << v.what;
  }
}

}  // namespace
}  // namespace sb::testing
