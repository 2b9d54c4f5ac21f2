// ZeRO-3 fetches as DeepSpeed 0.19.6 ships them (partitioned_param_coordinator.py
// fetch_sub_module -> __all_gather_params -> partition_parameters.py all_gather_coalesced): one
// all-gather per fetch batch (the module's missing tensors, then the prefetch), not one per
// tensor; stage3_max_live_parameters bounding the prefetch; stage3_model_persistence_threshold
// capping what persists. Counts in closed form from the model's module list; bytes unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tests/closed_forms.h"
#include "tests/mpi/run_fixture.h"

namespace sb::testing {
namespace {

uint64_t count_kind(const StrategyRun& r, CollKind k) {
  uint64_t n = 0;
  for (const LedgerEntry& e : r.step_entries) n += e.kind == k;
  return n;
}

// Each tensor gathered once per step as shipped (reuse distance 1e9 >> tiny): without prefetch,
// one all-gather per forward module that brings a tensor no earlier module used.
uint64_t fetching_modules(const ModelLayout& l) {
  std::set<int> seen;
  uint64_t n = 0;
  for (const auto& m : l.modules) {
    bool fresh = false;
    for (int t : m.tensors) fresh |= seen.insert(t).second;
    n += fresh;
  }
  return n;
}

RunConfig fetch_config() {
  RunConfig c = tiny_config(Precision::kFp32, 1);
  c.warmup = 1;  // the first step records the trace and releases every tensor
  return c;
}

TEST(Zero3Fetch, OneAllGatherPerFetchBatchNotPerTensor) {
  RunConfig c = fetch_config();
  c.options.overlap = false;  // no prefetch: each batch is one module's tensors
  const StrategyRun shipped = run("zero3", c, false);
  ASSERT_EQ(shipped.status, "ok") << shipped.error;
  const ModelLayout l = make_layout(c.model);
  EXPECT_EQ(count_kind(shipped, CollKind::kAllGather), fetching_modules(l));
  c.options.zero3_coalesced_fetch = false;  // per tensor: one each, the same bytes
  const StrategyRun per_tensor = run("zero3", c, false);
  ASSERT_EQ(per_tensor.status, "ok") << per_tensor.error;
  EXPECT_EQ(count_kind(per_tensor, CollKind::kAllGather), l.tensors.size());
  EXPECT_EQ(shipped.sent_intra_all, per_tensor.sent_intra_all);
  EXPECT_EQ(shipped.sent_inter_all, per_tensor.sent_inter_all);
  EXPECT_EQ(shipped.payload_bytes, per_tensor.payload_bytes);
}

// With the prefetch (overlap on), the first module's batch, then one batch of everything ahead
// (tiny is far under stage3_prefetch_bucket_size and stage3_max_live_parameters); a max_live of
// 0 leaves no room to prefetch, so each module fetches its own batch again.
TEST(Zero3Fetch, MaxLiveParametersBoundsThePrefetch) {
  RunConfig c = fetch_config();
  const StrategyRun dflt = run("zero3", c, false);
  ASSERT_EQ(dflt.status, "ok") << dflt.error;
  EXPECT_EQ(count_kind(dflt, CollKind::kAllGather), 2u);
  c.options.max_live_elements = 0;
  const StrategyRun none = run("zero3", c, false);
  ASSERT_EQ(none.status, "ok") << none.error;
  EXPECT_EQ(count_kind(none, CollKind::kAllGather), fetching_modules(make_layout(c.model)));
  EXPECT_EQ(none.sent_intra_all, dflt.sent_intra_all);
  EXPECT_EQ(none.sent_inter_all, dflt.sent_inter_all);
}

// stage3_model_persistence_threshold 100 with the per-tensor threshold 100: the first tensors of
// at most 100 elements persist until the next would pass 100 in all; bytes and model state as
// the closed forms with that set (tests/closed_forms.h zero3_persistent).
TEST(Zero3Fetch, ModelPersistenceThresholdCapsThePersistedTotal) {
  RunConfig c = fetch_config();
  const ModelLayout l = make_layout(c.model);
  // The cap one element below what the 100-element threshold alone persists: it must bind on
  // every model (tiny's and llama-tiny-pad's small tensors sum to different totals).
  const auto uncapped = closed_forms::zero3_persistent(l, 100);
  uint64_t uncapped_total = 0;
  for (size_t t = 0; t < l.tensors.size(); ++t)
    if (uncapped[t]) uncapped_total += l.tensors[t].numel;
  if (std::count(uncapped.begin(), uncapped.end(), true) < 2)
    GTEST_SKIP() << "fewer than two tensors of at most 100 elements";
  const uint64_t cap = uncapped_total - 1;
  c.options.persist_elements = 100;
  c.options.model_persist_elements = cap;
  const StrategyRun r = run("zero3", c, false);
  ASSERT_EQ(r.status, "ok") << r.error;
  const Topology& topo = run_env().topo;
  const auto persistent = closed_forms::zero3_persistent(l, 100, cap);
  uint64_t total = 0, count = 0;
  for (size_t t = 0; t < l.tensors.size(); ++t)
    if (persistent[t]) total += l.tensors[t].numel, ++count;
  EXPECT_LE(total, cap);
  EXPECT_GE(count, 1u);
  EXPECT_LT(count, uint64_t(std::count(uncapped.begin(), uncapped.end(), true)));
  const closed_forms::Bytes e = closed_forms::expected_bytes(
      "zero3", l, Precision::kFp32, 100, topo.world_size(), topo.ranks_per_node(),
      c.options.zero_grad_reduce, c.options.reuse_distance, -1, 0, false, false, cap);
  EXPECT_EQ(double(r.sent_intra_all), e.intra);
  EXPECT_EQ(double(r.sent_inter_all), e.inter);
  const closed_forms::ModelState s = closed_forms::expected_state(
      "zero3", l, Precision::kFp32, 100, topo.world_size(), topo.ranks_per_node(), 0, false, cap);
  EXPECT_EQ(r.model_state_params, s.params);
  EXPECT_EQ(r.model_state_grads, s.grads);
}

}  // namespace
}  // namespace sb::testing
