// DDP as PyTorch 1.13.1 ships it: the all-reduces of one step are the Reducer's buckets
// (reducer.cpp, compute_bucket_assignment_by_size: a tensor joins the open bucket, which closes
// once it reaches its limit; the first limit is dist._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB, the
// later ones bucket_cap_mb), in gradient-ready order, fp32 under autocast; the bucket copy of
// gradient_as_bucket_view=False costs Ψ·b_g of communication buffer; parity holds for each knob.
#include <gtest/gtest.h>

#include <functional>

#include "strategies/buckets.h"
#include "tests/closed_forms.h"
#include "tests/mpi/run_fixture.h"

namespace sb::testing {
namespace {

// The sizes (elements) of the all-reduces of the last measured step, in issue order.
std::vector<uint64_t> all_reduce_counts(const StrategyRun& r) {
  std::vector<uint64_t> out;
  for (const LedgerEntry& e : r.step_entries)
    if (e.kind == CollKind::kAllReduce) out.push_back(e.count);
  return out;
}

// The partition the Reducer's rule implies, checked as its defining properties rather than by
// re-running it: buckets are consecutive runs of autograd's ready order covering every tensor
// once; every bucket but the last has reached its limit, and had not before its last tensor.
void expect_reducer_partition(const std::vector<uint64_t>& buckets, const ModelLayout& l,
                              uint64_t first_limit, uint64_t limit) {
  const std::vector<int> order = autograd_ready_order(l);
  size_t next = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    uint64_t sum = 0, before_last = 0;
    while (next < order.size() && sum < buckets[b]) {
      before_last = sum;
      sum += l.tensors[order[next++]].numel;
    }
    ASSERT_EQ(sum, buckets[b]) << "bucket " << b << " is not a run of whole tensors";
    const uint64_t lim = b == 0 ? first_limit : limit;
    if (b + 1 < buckets.size()) {
      EXPECT_GE(sum, lim) << "bucket " << b << " closed before its limit";
      EXPECT_LT(before_last, lim) << "bucket " << b << " should have closed one tensor earlier";
    } else {
      EXPECT_LT(before_last, lim) << "the last bucket should have closed earlier";
    }
  }
  EXPECT_EQ(next, order.size()) << "tensors left without a bucket";
}

struct Shape { const char* what; double first_mb, cap_mb; Precision p; bool bf16_params; };

class DdpBuckets : public ::testing::TestWithParam<Shape> {};

TEST_P(DdpBuckets, AllReducesAreTheReducersBuckets) {
  const Shape& s = GetParam();
  RunConfig cfg = tiny_config(s.p, 1);
  cfg.options.ddp.first_bucket_mb = s.first_mb;
  cfg.options.ddp.bucket_cap_mb = s.cap_mb;
  cfg.options.ddp.bf16_params = s.bf16_params;
  const StrategyRun r = run("ddp", cfg, false);
  ASSERT_EQ(r.status, "ok") << r.error;
  const ModelLayout l = make_layout(cfg.model);
  const double b = closed_forms::ddp_param_bytes(s.p, s.bf16_params);
  for (const LedgerEntry& e : r.step_entries) EXPECT_EQ(double(dtype_bytes(e.dtype)), b);
  const auto elems = [&](double mb) { return uint64_t(mb * 1024 * 1024 / b); };
  const std::vector<uint64_t> buckets = all_reduce_counts(r);
  ASSERT_FALSE(buckets.empty());
  expect_reducer_partition(buckets, l, elems(s.first_mb), elems(s.cap_mb));
  if (s.first_mb >= 1) {
    EXPECT_EQ(buckets.size(), 1u) << "tiny (112 KB) fits the 1 MiB bucket";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DdpBuckets,
    ::testing::Values(Shape{"defaults", 1.0, 25.0, Precision::kFp32, false},
                      Shape{"small_caps", 0.01, 0.03, Precision::kFp32, false},
                      Shape{"autocast_fp32_buckets", 0.01, 0.03, Precision::kBf16Mixed, false},
                      Shape{"bf16_params", 0.01, 0.03, Precision::kBf16Mixed, true},
                      Shape{"uniform", 0.02, 0.02, Precision::kFp32, false}),
    [](const auto& info) { return std::string(info.param.what); });

TEST(DdpBucketView, TheBucketCopyIsPsiTimesGradBytes) {
  RunConfig cfg = tiny_config(Precision::kFp32, 1);
  cfg.options.overlap = false;  // buffers at fixed points: the peaks are comparable
  const StrategyRun copy = run("ddp", cfg, false);
  cfg.options.ddp.gradient_as_bucket_view = true;
  const StrategyRun view = run("ddp", cfg, false);
  ASSERT_EQ(copy.status, "ok") << copy.error;
  ASSERT_EQ(view.status, "ok") << view.error;
  const ModelLayout l = make_layout(cfg.model);
  const int comm = int(MemCategory::kCommBuffers);
  EXPECT_EQ(copy.breakdown_at_peak[comm] - view.breakdown_at_peak[comm],
            closed_forms::ddp_bucket_copy_bytes(l, Precision::kFp32, false, false));
  EXPECT_EQ(copy.peak_bytes - view.peak_bytes,
            closed_forms::ddp_bucket_copy_bytes(l, Precision::kFp32, false, false));
  EXPECT_EQ(copy.model_state_grads, view.model_state_grads);
}

TEST(DdpParity, EveryKnobTrainsLikeTheReference) {
  const Reference ref = reference_run(tiny_config(), global_batch(), 5);
  const std::vector<std::pair<const char*, std::function<void(RunConfig&)>>> knobs = {
      {"bucket view", [](RunConfig& c) { c.options.ddp.gradient_as_bucket_view = true; }},
      {"copy, small buckets", [](RunConfig& c) {
         c.options.ddp.first_bucket_mb = 0.01;
         c.options.ddp.bucket_cap_mb = 0.03;
       }},
      {"view, small buckets, overlap off", [](RunConfig& c) {
         c.options.ddp.gradient_as_bucket_view = true;
         c.options.ddp.first_bucket_mb = 0.02;
         c.options.ddp.bucket_cap_mb = 0.01;
         c.options.overlap = false;
       }},
  };
  for (const auto& [what, set] : knobs) {
    RunConfig c = tiny_config();
    set(c);
    const StrategyRun r = run("ddp", c);
    ASSERT_EQ(r.status, "ok") << what << ": " << r.error;
    EXPECT_LT(rel_norm_diff(r.params, ref.params), 1e-5) << what;
  }
}

// Gradient accumulation as DDP.no_sync(): K micro-batches of the run's batch per rank, local
// sums, one reduction per optimizer step. The reference trains on the same global batch
// (N·b·K samples, one full-batch step), so the parameters must agree as in the K = 1 parity.
class DdpGradAccum : public ::testing::TestWithParam<int> {};

TEST_P(DdpGradAccum, NoSyncTrainsLikeTheFullBatchReference) {
  const int K = GetParam();
  const Reference ref = reference_run(tiny_config(), global_batch() * K, 3);
  for (bool view : {false, true}) {
    RunConfig c = tiny_config(Precision::kFp32, 3);
    c.options.grad_accum = K;
    c.options.ddp.gradient_as_bucket_view = view;
    c.options.ddp.first_bucket_mb = 0.01;  // several buckets
    c.options.ddp.bucket_cap_mb = 0.03;
    const StrategyRun r = run("ddp", c);
    ASSERT_EQ(r.status, "ok") << r.error;
    EXPECT_LT(rel_norm_diff(r.params, ref.params), 1e-5) << "K " << K << " view " << view;
    for (size_t s = 0; s < ref.loss.size(); ++s)
      EXPECT_NEAR(r.loss[s], ref.loss[s], 1e-5 * std::fabs(ref.loss[s])) << "step " << s;
    // no_sync: the buckets are reduced once per optimizer step, not once per micro-batch
    const ModelLayout l = make_layout(c.model);
    const std::vector<uint64_t> buckets = all_reduce_counts(r);
    const uint64_t first = uint64_t(0.01 * 1024 * 1024 / 4), cap = uint64_t(0.03 * 1024 * 1024 / 4);
    expect_reducer_partition(buckets, l, first, cap);
  }
}

INSTANTIATE_TEST_SUITE_P(K, DdpGradAccum, ::testing::Values(2, 3));

}  // namespace
}  // namespace sb::testing
