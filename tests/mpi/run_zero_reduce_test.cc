// ZeRO-1/2 with DeepSpeed's use_multi_rank_bucket_allreduce false (--zero-bucket-reduce
// reduce_per_owner; stage_1_and_2.py average_tensor -> allreduce_no_retain(rank=dst)): one
// reduce per owning rank's slice of each gradient bucket. Checked here: the collectives issued
// (which slice to which root), the bytes per rank and summed against the closed form of
// tests/closed_forms.h, and parity with the 1-rank run, with gradient accumulation too.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "strategies/buckets.h"
#include "tests/closed_forms.h"
#include "tests/mpi/run_fixture.h"

namespace sb::testing {
namespace {

RunConfig per_owner_config(Precision p, double bucket_mb, int steps = 2) {
  RunConfig c = tiny_config(p, steps);
  c.options.zero_grad_reduce = ZeroGradReduce::kReducePerOwner;
  c.options.bucket_mb = bucket_mb;
  return c;
}

BucketPlan zero_buckets(const RunConfig& c, int world) {
  const ModelLayout l = make_layout(c.model);
  return plan_buckets(l, tensors_in_grad_ready_order(l), c.options.bucket_elements(),
                      uint64_t(world));
}

// Owner r's slice of a bucket of psi elements in chunks of `chunk`: clamp(psi − r·chunk, 0, chunk).
uint64_t owned_len(uint64_t psi, uint64_t chunk, int r) {
  const uint64_t begin = uint64_t(r) * chunk;
  return begin >= psi ? 0 : std::min(chunk, psi - begin);
}

// closed_forms.h (ZeRO-1/2, use_multi_rank_bucket_allreduce false): rank i sends, per bucket,
// (ψ_b − ℓ_i)·b_g in the owners' reduces and (N−1)·c_b·b_p in the all-gather, all to its ring
// successor.
uint64_t rank_bytes(const BucketPlan& plan, int N, int i, uint64_t b) {
  uint64_t sum = 0;
  for (const FlatLayout& bucket : plan.buckets) {
    const uint64_t chunk = bucket.shard_size(N);
    sum += (bucket.numel - owned_len(bucket.numel, chunk, i)) * b;
    sum += uint64_t(N - 1) * chunk * b;
  }
  return N == 1 ? 0 : sum;
}

class ZeroReducePerOwner
    : public ::testing::TestWithParam<std::tuple<std::string, Precision, double>> {};

TEST_P(ZeroReducePerOwner, OneReducePerOwnerBytesEqualClosedForm) {
  const auto& [s, p, bucket_mb] = GetParam();
  const RunConfig c = per_owner_config(p, bucket_mb);
  const StrategyRun r = run(s, c, false);
  ASSERT_EQ(r.status, "ok") << r.error;
  const Topology& t = run_env().topo;
  const int N = t.world_size(), me = t.rank();
  const BucketPlan plan = zero_buckets(c, N);
  // The reduces of the step: bucket b's slice of owner o to root o, ℓ_o elements, o with ℓ_o > 0.
  std::multiset<std::tuple<std::string, int, size_t>> want, got;
  for (size_t b = 0; b < plan.buckets.size(); ++b)
    for (int o = 0; o < N; ++o)
      if (uint64_t len = owned_len(plan.buckets[b].numel, plan.buckets[b].shard_size(N), o))
        want.insert({"bucket" + std::to_string(b), o, size_t(len)});
  size_t gathers = 0, others = 0;
  for (const LedgerEntry& e : r.step_entries) {
    if (e.kind == CollKind::kReduce) got.insert({e.tag, e.root_index, e.count});
    else if (e.kind == CollKind::kAllGather) ++gathers;
    else ++others;
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(gathers, plan.buckets.size());
  EXPECT_EQ(others, 0u) << "no all-reduce, no reduce-scatter";
  // Bytes: this rank's, and summed over ranks by hop class (a rank's bytes all go to its
  // successor in the world ring).
  const uint64_t bytes = dtype_bytes(c.options.grad_dtype());
  ASSERT_EQ(bytes, dtype_bytes(c.options.param_dtype()));
  EXPECT_EQ(r.sent_local.total(), rank_bytes(plan, N, me, bytes));
  uint64_t intra = 0, inter = 0;
  for (int i = 0; i < N; ++i)
    (t.same_node(i, (i + 1) % N) ? intra : inter) += rank_bytes(plan, N, i, bytes);
  EXPECT_EQ(r.sent_intra_all, intra);
  EXPECT_EQ(r.sent_inter_all, inter);
  // The closed form summed over ranks: (N−1)·Ψ·b_g for the reduces plus the all-gather of
  // Ψ_pad, the whole model padded once: a model in one bucket (the default 25 MiB; several
  // buckets pad each, which the per-bucket form above counts). Per hop class where every rank
  // sends the same (one hop class, or buckets that divide by N).
  if (plan.buckets.size() != 1) return;
  const bool divide = std::all_of(plan.buckets.begin(), plan.buckets.end(), [&](const auto& b) {
    return b.numel % uint64_t(N) == 0;
  });
  const bool even = N == t.ranks_per_node() || t.ranks_per_node() == 1 || divide;
  const closed_forms::Bytes e = closed_forms::expected_bytes(
      s, make_layout(c.model), p, 0, N, t.ranks_per_node(), ZeroGradReduce::kReducePerOwner);
  EXPECT_EQ(double(intra + inter), e.intra + e.inter);
  if (even) {
    EXPECT_EQ(double(r.sent_intra_all), e.intra);
    EXPECT_EQ(double(r.sent_inter_all), e.inter);
  }
}

// Default buckets (the whole model in one, 25 MiB) and 0.01 MiB ones (several buckets, most
// of them uneven over 3 and 4).
INSTANTIATE_TEST_SUITE_P(
    Zero12, ZeroReducePerOwner,
    ::testing::Combine(::testing::Values("zero1", "zero2"),
                       ::testing::Values(Precision::kFp32, Precision::kBf16Mixed),
                       ::testing::Values(25.0, 0.01)),
    [](const auto& info) {
      return std::get<0>(info.param) +
             (std::get<1>(info.param) == Precision::kFp32 ? "_fp32" : "_bf16") +
             (std::get<2>(info.param) < 1 ? "_small_buckets" : "");
    });

// Memory: the reduces work in the same full bucket the all-reduce works in (the stage-1 grads,
// the stage-2 staging until its owner's slice is kept), so model state and peak (overlap off:
// frees in program order) are the shipped all-reduce's, whose closed forms run_memory_test.cc
// checks.
TEST(ZeroReducePerOwnerMemory, SameStateAndPeakAsTheBucketAllReduce) {
  for (const char* s : {"zero1", "zero2"}) {
    RunConfig c = per_owner_config(Precision::kBf16Mixed, 0.01);
    c.options.overlap = false;
    const StrategyRun owner = run(s, c, false);
    c.options.zero_grad_reduce = ZeroGradReduce::kBucketAllReduce;
    const StrategyRun all = run(s, c, false);
    ASSERT_EQ(owner.status, "ok") << owner.error;
    ASSERT_EQ(all.status, "ok") << all.error;
    EXPECT_EQ(owner.model_state_params, all.model_state_params) << s;
    EXPECT_EQ(owner.model_state_grads, all.model_state_grads) << s;
    EXPECT_EQ(owner.model_state_optimizer, all.model_state_optimizer) << s;
    EXPECT_EQ(owner.peak_bytes, all.peak_bytes) << s;
  }
}

// Gradient accumulation (K = 2): ZeRO-1 reduces at the boundary only, ZeRO-2 every micro-batch
// (its owners add each reduced slice into their partition); both train as the full batch does.
TEST(ZeroReducePerOwnerAccum, TrainsLikeTheFullBatchReference) {
  const int K = 2;
  const Reference ref = reference_run(tiny_config(), global_batch() * K, 3);
  for (const char* s : {"zero1", "zero2"}) {
    RunConfig c = per_owner_config(Precision::kFp32, 0.01, 3);
    c.options.grad_accum = K;
    const StrategyRun r = run(s, c);
    ASSERT_EQ(r.status, "ok") << s << ": " << r.error;
    EXPECT_LT(rel_norm_diff(r.params, ref.params), 1e-5) << s;
    c.options.grad_accum = 1;
    const StrategyRun one = run(s, c, false);
    ASSERT_EQ(one.status, "ok") << one.error;
    const auto reduces = [](const StrategyRun& x) {
      return std::count_if(x.step_entries.begin(), x.step_entries.end(),
                           [](const LedgerEntry& e) { return e.kind == CollKind::kReduce; });
    };
    EXPECT_EQ(reduces(r), (std::string(s) == "zero1" ? 1 : K) * reduces(one)) << s;
  }
}

}  // namespace
}  // namespace sb::testing
