// The predictor equals, exactly, the closed forms that the multi-rank strategy tests check the
// real runs against (tests/mpi/run_bytes_test.cc and run_memory_test.cc, restated here): bytes
// per step summed over ranks, intra and inter, and model-state bytes per rank, for tiny and
// small at world 4 with 2 ranks per node (and 8 x 4), fp32 and bf16-mixed, ZeRO-3 with and
// without a persistence threshold. Also: the ring closed form equals ring_model_sent per rank,
// the topology path equals the closed-form path, and the activation formula equals what
// GptModel allocates.
#include <gtest/gtest.h>

#include <map>

#include "harness/device/device.h"
#include "harness/model/gpt.h"
#include "harness/predict/predict.h"

namespace sb {
namespace {

uint64_t rup(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

struct Case {
  std::string model;
  std::string strategy;
  Precision precision;
  uint64_t persist;
};

PredictConfig config_of(const Case& c, int world, int rpn) {
  PredictConfig cfg;
  cfg.model = model_shape(parse_model(c.model));
  cfg.world = world;
  cfg.ranks_per_node = rpn;
  cfg.options.precision = c.precision;
  cfg.options.persist_elements = c.persist;
  return cfg;
}

// FSDP's Ψ_pad for --wrap block and the root unit's share (run_bytes_test.cc).
std::pair<uint64_t, uint64_t> fsdp_padded(const ModelLayout& l, uint64_t S) {
  std::map<int, uint64_t> unit;
  const int L = l.config.n_layer;
  for (const auto& t : l.tensors)
    unit[(t.segment == 0 || t.segment == L + 1) ? 0 : t.segment] += t.numel;
  uint64_t all = 0;
  for (auto& [u, n] : unit) all += rup(n, S);
  return {all, rup(unit[0], S)};
}

// run_bytes_test.cc's expected_bytes: summed over ranks per step.
std::pair<double, double> expected_bytes(const Case& c, const ModelLayout& l, double N, double G) {
  const double M = N / G, bp = c.precision == Precision::kFp32 ? 4 : 2, bg = bp;
  const double psi = double(l.num_params());
  auto world_ring = [&](double per_rank) {
    const double inter_hops = M > 1 ? M : 0;
    return std::pair<double, double>{(N - inter_hops) * per_rank, inter_hops * per_rank};
  };
  const std::string& s = c.strategy;
  if (s == "ddp") return world_ring(2 * (N - 1) / N * psi * bg);
  if (s == "zero1" || s == "zero2")
    return world_ring((N - 1) / N * double(rup(l.num_params(), uint64_t(N))) * (bg + bp));
  if (s == "zero3") {
    const std::vector<int> uses = l.uses_per_pass();
    double sum = 0;
    for (size_t t = 0; t < l.tensors.size(); ++t) {
      const double pad = double(rup(l.tensors[t].numel, uint64_t(N)));
      const bool persist = l.tensors[t].numel < c.persist;
      sum += pad * (bg + (persist ? bp : 2.0 * uses[t] * bp));
    }
    return world_ring((N - 1) / N * sum);
  }
  const bool hybrid = s.find("hybrid") != std::string::npos;
  const bool full = s == "fsdp_full_shard" || s == "fsdp_hybrid_shard";
  const double S = hybrid ? G : N;
  const auto [pad, root] = fsdp_padded(l, uint64_t(S));
  const double gathered = full ? 2.0 * double(pad) - double(root) : double(pad);
  const double shard_group = (S - 1) / S * (gathered * bp + double(pad) * bg);
  if (!hybrid) return world_ring(shard_group);
  return {N * shard_group, 2 * (M - 1) * double(pad) * bg};
}

// run_memory_test.cc's expected_state: params, grads, optimizer bytes per rank at rest.
std::array<uint64_t, 3> expected_state(const Case& c, const ModelLayout& l, uint64_t N,
                                       uint64_t G) {
  const bool fp32 = c.precision == Precision::kFp32;
  const uint64_t bp = fp32 ? 4 : 2, bg = bp, K = fp32 ? 8 : 12;
  const uint64_t psi = l.num_params(), psi_n = rup(psi, N);
  const std::string& s = c.strategy;
  if (s == "ddp") return {bp * psi, bg * psi, K * psi};
  if (s == "zero1") return {bp * psi_n, bg * psi_n, K * psi_n / N};
  if (s == "zero2") return {bp * psi_n, bg * psi_n / N, K * psi_n / N};
  if (s == "zero3") {
    uint64_t pad = 0, persistent = 0;
    for (const auto& t : l.tensors) {
      pad += rup(t.numel, N);
      if (t.numel < c.persist) persistent += rup(t.numel, N);  // kept whole: params only
    }
    return {bp * (pad / N + persistent), bg * pad / N, K * pad / N};
  }
  const uint64_t S = s.find("hybrid") != std::string::npos ? G : N;
  const uint64_t pad = fsdp_padded(l, S).first;
  return {bp * pad / S, bg * pad / S, K * pad / S};
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const char* m : {"tiny", "small"})
    for (const auto& s : strategy_names())
      for (Precision p : {Precision::kFp32, Precision::kBf16Mixed}) v.push_back({m, s, p, 0});
  v.push_back({"tiny", "zero3", Precision::kFp32, 100});
  v.push_back({"tiny", "zero3", Precision::kBf16Mixed, 5000});
  v.push_back({"small", "zero3", Precision::kFp32, 1000});
  return v;
}

class PredictClosedForms : public ::testing::TestWithParam<Case> {};

TEST_P(PredictClosedForms, BytesAndModelStateEqualTheStrategyTestsForms) {
  const Case& c = GetParam();
  const Cluster cluster = load_cluster("cpu-local");
  for (auto [N, G] : {std::pair{4, 2}, std::pair{8, 4}, std::pair{4, 4}, std::pair{4, 1}}) {
    const PredictConfig cfg = config_of(c, N, G);
    const ModelLayout& l = cfg.model->layout;
    const Prediction p = predict(cfg, c.strategy, cluster);
    const auto [intra, inter] = expected_bytes(c, l, N, G);
    const std::string at = "world " + std::to_string(N) + " rpn " + std::to_string(G);
    EXPECT_EQ(double(p.traffic.sent_intra), intra) << at;
    EXPECT_EQ(double(p.traffic.sent_inter), inter) << at;
    const auto state = expected_state(c, l, N, G);
    EXPECT_EQ(p.state_params, state[0]) << at;
    EXPECT_EQ(p.state_grads, state[1]) << at;
    EXPECT_EQ(p.state_optimizer, state[2]) << at;
    // The same through ring_model_sent on a topology of virtual nodes.
    const Topology topo = Topology::virtual_nodes(N, 0, G);
    const Prediction q = predict(cfg, c.strategy, cluster, &topo);
    EXPECT_EQ(q.traffic.sent_intra, p.traffic.sent_intra) << at;
    EXPECT_EQ(q.traffic.sent_inter, p.traffic.sent_inter) << at;
    EXPECT_EQ(q.traffic.max_rank_sent, p.traffic.max_rank_sent) << at;
    EXPECT_EQ(q.traffic.max_rank_inter, p.traffic.max_rank_inter) << at;
    EXPECT_EQ(q.peak, p.peak) << at;
  }
}

INSTANTIATE_TEST_SUITE_P(TinySmall, PredictClosedForms, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return c.model + "_" + c.strategy +
                                  (c.precision == Precision::kFp32 ? "_fp32" : "_bf16") +
                                  (c.persist ? "_persist" + std::to_string(c.persist) : "");
                         });

TEST(PredictRing, ClosedFormEqualsRingModelSentPerRank) {
  for (auto [N, G] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{4, 2}, std::pair{6, 3},
                      std::pair{8, 2}, std::pair{12, 4}}) {
    for (int r = 0; r < N; ++r) {
      const Topology topo = Topology::virtual_nodes(N, r, G);
      for (GroupKind g : {GroupKind::kWorld, GroupKind::kIntra, GroupKind::kInter})
        for (CollKind k : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather,
                           CollKind::kBroadcast})
          for (uint64_t count : {0ull, 1ull, 5ull, 12ull, 1001ull, 65537ull}) {
            const Group& grp = topo.group(g);
            const HopBytes h = ring_model_sent(k, count, DType::kBF16, grp, topo);
            EXPECT_EQ(ring_sent_closed_form(k, count, 2, grp.size(), grp.index), h.total())
                << coll_name(k) << " " << count << " n=" << grp.size() << " i=" << grp.index;
          }
    }
  }
}

TEST(PredictRing, UnevenCountsAgreeBetweenClosedFormAndTopologyPaths) {
  const Cluster cluster = load_cluster("dgx-h100");
  for (auto [N, G] : {std::pair{6, 3}, std::pair{8, 2}, std::pair{12, 4}}) {
    TrafficAccount closed(N, G, cluster);
    const Topology topo = Topology::virtual_nodes(N, 0, G);
    TrafficAccount ring(topo, cluster);
    for (uint64_t count : {7ull, 13ull, 1000003ull, 5ull})
      for (GroupKind g : {GroupKind::kWorld, GroupKind::kIntra, GroupKind::kInter})
        for (CollKind k : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather}) {
          closed.add({k, g, count, DType::kF32});
          ring.add({k, g, count, DType::kF32});
        }
    const Traffic a = closed.finish(), b = ring.finish();
    EXPECT_EQ(a.sent_intra, b.sent_intra);
    EXPECT_EQ(a.sent_inter, b.sent_inter);
    EXPECT_EQ(a.max_rank_sent, b.max_rank_sent);
    EXPECT_EQ(a.max_rank_intra, b.max_rank_intra);
    EXPECT_EQ(a.max_rank_inter, b.max_rank_inter);
  }
}

TEST(PredictActivations, FormulaEqualsWhatGptModelAllocates) {
  for (const char* spec : {"tiny", "small", "3,48,6,20,97"}) {
    for (int batch : {1, 3}) {
      const GptConfig c = parse_model(spec);
      auto dev = make_cpu_device();
      MemoryTracker mem(dev->allocator());
      GptModel model(c, batch, *dev, mem);
      EXPECT_EQ(activation_bytes(c, batch), mem.current(MemCategory::kActivations)) << spec;
    }
  }
}

}  // namespace
}  // namespace sb
