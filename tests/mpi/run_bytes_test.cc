// Bytes: the ledger's counted per-step traffic of every strategy equals the closed forms of
// DESIGN.md §2 (ring: nccl-tests PERFORMANCE.md; volumes: ZeRO paper §7, FSDP paper §3), with
// the real padded sizes and ZeRO-3's persistence threshold, in fp32 and bf16-mixed.
// Sizes in `tiny` divide evenly, so every rank of a ring sends the same X bytes; summed over
// ranks, a world ring over M > 1 consecutive virtual nodes has M inter-node hops and N - M
// intra-node hops; a node ring is all intra; the ring across nodes is all inter.
#include <gtest/gtest.h>

#include <map>

#include "tests/mpi/run_fixture.h"

namespace sb::testing {
namespace {

uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

struct Expected { double intra = 0, inter = 0; };

// Ψ_pad of FSDP's units for --wrap block, and the root unit's share.
std::pair<uint64_t, uint64_t> fsdp_padded(const ModelLayout& l, uint64_t S) {
  std::map<int, uint64_t> unit;  // 0 = root, b+1 = block b
  const int L = l.config.n_layer;
  for (const auto& t : l.tensors) unit[(t.segment == 0 || t.segment == L + 1) ? 0 : t.segment] += t.numel;
  uint64_t all = 0;
  for (auto& [u, n] : unit) all += round_up(n, S);
  return {all, round_up(unit[0], S)};
}

Expected expected_bytes(const std::string& s, const RunConfig& cfg, const Topology& topo) {
  const ModelLayout l = make_layout(cfg.model);
  const double N = topo.world_size(), G = topo.ranks_per_node(), M = topo.num_nodes();
  const double bp = cfg.options.precision == Precision::kFp32 ? 4 : 2, bg = bp;
  const double psi = double(l.num_params());
  auto world_ring = [&](double per_rank) {  // split a world ring's bytes over hop classes
    Expected e;
    const double inter_hops = M > 1 ? M : 0;
    e.inter = inter_hops * per_rank;
    e.intra = (N - inter_hops) * per_rank;
    return e;
  };
  if (s == "ddp") return world_ring(2 * (N - 1) / N * psi * bg);
  if (s == "zero1" || s == "zero2")
    return world_ring((N - 1) / N * double(round_up(l.num_params(), uint64_t(N))) * (bg + bp));
  if (s == "zero3") {
    const std::vector<int> uses = l.uses_per_pass();
    double sum = 0;
    for (size_t t = 0; t < l.tensors.size(); ++t) {
      const double pad = double(round_up(l.tensors[t].numel, uint64_t(N)));
      const bool persist = l.tensors[t].numel < cfg.options.persist_elements;
      // gathered before every use in forward and again in backward; persistent tensors are
      // gathered once, after the step; every gradient is reduce-scattered once
      sum += pad * (bg + (persist ? bp : 2.0 * uses[t] * bp));
    }
    return world_ring((N - 1) / N * sum);
  }
  const bool hybrid = s.find("hybrid") != std::string::npos;
  const bool full = s == "fsdp_full_shard" || s == "fsdp_hybrid_shard";
  const double S = hybrid ? G : N;
  const auto [pad, root] = fsdp_padded(l, uint64_t(S));
  // FULL_SHARD gathers Ψ in forward and Ψ - Ψ_root in backward; SHARD_GRAD_OP gathers once.
  const double gathered = full ? 2.0 * double(pad) - double(root) : double(pad);
  const double shard_group = (S - 1) / S * (gathered * bp + double(pad) * bg);
  if (!hybrid) return world_ring(shard_group);
  Expected e;
  e.intra = N * shard_group;
  e.inter = 2 * (M - 1) * double(pad) * bg;  // all-reduce of every shard across nodes, summed
  return e;
}

struct Case { std::string strategy; Precision precision; uint64_t persist; };

class Bytes : public ::testing::TestWithParam<Case> {};

TEST_P(Bytes, CountedTrafficEqualsClosedForm) {
  const Case& c = GetParam();
  RunConfig cfg = tiny_config(c.precision, 2);
  cfg.options.persist_elements = c.persist;
  const StrategyRun r = run(c.strategy, cfg, false);
  ASSERT_EQ(r.status, "ok") << r.error;
  EXPECT_TRUE(r.traffic_counted);
  const Expected e = expected_bytes(c.strategy, cfg, run_env().topo);
  EXPECT_EQ(double(r.sent_intra_all), e.intra) << "intra-node bytes per step, summed over ranks";
  EXPECT_EQ(double(r.sent_inter_all), e.inter) << "inter-node bytes per step, summed over ranks";
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const auto& s : strategy_names())
    for (Precision p : {Precision::kFp32, Precision::kBf16Mixed}) v.push_back({s, p, 0});
  v.push_back({"zero3", Precision::kFp32, 100});   // layer norms and biases stay whole
  v.push_back({"zero3", Precision::kBf16Mixed, 5000});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, Bytes, ::testing::ValuesIn(cases()), [](const auto& info) {
  return info.param.strategy + (info.param.precision == Precision::kFp32 ? "_fp32" : "_bf16") +
         (info.param.persist ? "_persist" + std::to_string(info.param.persist) : "");
});

TEST(BytesShape, ZeroThreeIssuesMoreSmallerCollectivesThanFullShard) {
  const StrategyRun z3 = run("zero3", tiny_config(Precision::kFp32, 2), false);
  const StrategyRun fs = run("fsdp_full_shard", tiny_config(Precision::kFp32, 2), false);
  ASSERT_EQ(z3.status, "ok");
  ASSERT_EQ(fs.status, "ok");
  EXPECT_GT(z3.step_entries.size(), fs.step_entries.size());
  EXPECT_LT(double(z3.payload_bytes) / z3.step_entries.size(),
            double(fs.payload_bytes) / fs.step_entries.size());
}

TEST(BytesShape, HybridMovesFewerInterNodeBytesThanFullShard) {
  const Topology& t = run_env().topo;
  if (t.num_nodes() < 2 || t.ranks_per_node() < 2) GTEST_SKIP() << "needs >= 2 nodes of >= 2 ranks";
  const StrategyRun hy = run("fsdp_hybrid_shard", tiny_config(Precision::kFp32, 2), false);
  const StrategyRun fs = run("fsdp_full_shard", tiny_config(Precision::kFp32, 2), false);
  EXPECT_LT(hy.sent_inter_all, fs.sent_inter_all);
}

}  // namespace
}  // namespace sb::testing
