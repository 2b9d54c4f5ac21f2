// The predictor equals, exactly, the closed forms that the multi-rank strategy tests check the
// real runs against (tests/closed_forms.h, shared with run_bytes_test.cc and run_memory_test.cc): bytes
// per step summed over ranks, intra and inter, and model-state bytes per rank, for tiny and
// small at world 4 with 2 ranks per node (and 8 x 4), fp32 and bf16-mixed, ZeRO-3 with and
// without a persistence threshold. Also: the ring closed form equals ring_model_sent per rank,
// the topology path equals the closed-form path, and the activation formula equals what
// GptModel allocates.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>

#include "harness/device/device.h"
#include "harness/model/checkpointing.h"
#include "harness/model/gpt.h"
#include "harness/predict/predict.h"
#include "tests/closed_forms.h"
#include "tests/unit/traffic_test_util.h"

namespace sb {
namespace {

struct Case {
  std::string model;
  std::string strategy;
  Precision precision;
  uint64_t persist;
  ZeroSchedule schedule = ZeroSchedule::kShipped;
  int ac = 0;  // --activation-checkpointing every-K (0 none)
};

PredictConfig config_of(const Case& c, int world, int rpn) {
  PredictConfig cfg;
  GptConfig m = parse_model(c.model);
  m.checkpoint_every = c.ac;
  cfg.model = model_shape(m);
  cfg.world = world;
  cfg.ranks_per_node = rpn;
  cfg.options.precision = c.precision;
  cfg.options.persist_elements = c.persist;
  apply_zero_schedule(c.schedule, cfg.options);
  return cfg;
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const char* m : {"tiny", "small"})
    for (const auto& s : strategy_names())
      for (Precision p : {Precision::kFp32, Precision::kBf16Mixed}) v.push_back({m, s, p, 0});
  v.push_back({"tiny", "zero3", Precision::kFp32, 100});
  v.push_back({"tiny", "zero3", Precision::kBf16Mixed, 5000});
  v.push_back({"small", "zero3", Precision::kFp32, 1000});
  for (const char* m : {"tiny", "small"})
    for (const char* s : {"zero1", "zero2", "zero3"})
      for (Precision p : {Precision::kFp32, Precision::kBf16Mixed})
        v.push_back({m, s, p, 0, ZeroSchedule::kPaper});
  // Activation checkpointing (small: blocks 1 and 3 with every-2; tiny: both with block).
  for (const auto& s : strategy_names())
    v.push_back({"small", s, Precision::kFp32, 0, ZeroSchedule::kShipped, 2});
  for (const char* m : {"tiny", "small"})
    v.push_back({m, "zero3", Precision::kBf16Mixed, 0, ZeroSchedule::kPaper, 1});
  // op checkpointing: every block's recompute fires its modules' hooks (ZeRO-3 paper gathers
  // each block a third time; FSDP's backward gather covers it). MiCS's per-unit schedule under op
  // checkpointing is pinned by the multi-rank byte test (run_bytes_test.cc).
  for (const char* s : {"zero3", "fsdp_full_shard"})
    v.push_back({"small", s, Precision::kBf16Mixed, 0, ZeroSchedule::kPaper, kCheckpointOp});
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
    const auto [intra, inter] =
        closed_forms::expected_bytes(c.strategy, l, c.precision, c.persist, N, G,
                                     cfg.options.zero_grad_reduce, cfg.options.reuse_distance);
    const std::string at = "world " + std::to_string(N) + " rpn " + std::to_string(G);
    EXPECT_EQ(double(p.traffic.sent_intra), intra) << at;
    EXPECT_EQ(double(p.traffic.sent_inter), inter) << at;
    const closed_forms::ModelState state =
        closed_forms::expected_state(c.strategy, l, c.precision, c.persist, N, G);
    EXPECT_EQ(p.state_params, state.params) << at;
    EXPECT_EQ(p.state_grads, state.grads) << at;
    EXPECT_EQ(p.state_optimizer, state.optimizer) << at;
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
                                  (c.persist ? "_persist" + std::to_string(c.persist) : "") +
                                  (c.schedule == ZeroSchedule::kPaper ? "_paper" : "") +
                                  (c.ac > 0 ? "_ac_every" + std::to_string(c.ac)
                                   : c.ac < 0 ? std::string("_ac_op") : std::string(""));
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

// Reduce: the chain ends at the root, every other position sends the whole buffer; the
// closed-form path (per-position differences) and the per-rank topology path agree per rank.
TEST(PredictRing, ReduceToEveryRootAgreesBetweenClosedFormAndTopologyPaths) {
  const Cluster cluster = load_cluster("dgx-h100");
  for (auto [N, G] : {std::pair{3, 1}, std::pair{4, 2}, std::pair{6, 3}}) {
    TrafficAccount closed(N, G, cluster);
    const Topology topo = Topology::virtual_nodes(N, 0, G);
    TrafficAccount ring(topo, cluster);
    uint64_t sent = 0;
    for (GroupKind g : {GroupKind::kWorld, GroupKind::kIntra, GroupKind::kInter}) {
      const int n = topo.group(g).size();
      for (int root = 0; root < n; ++root) {
        closed.add({CollKind::kReduce, g, 1001, DType::kF32, root});
        ring.add({CollKind::kReduce, g, 1001, DType::kF32, root});
        sent += n > 1 ? uint64_t(n - 1) * 1001 * 4 * uint64_t(N / n) : 0;
      }
    }
    const Traffic a = closed.finish(), b = ring.finish();
    EXPECT_EQ(a.sent_intra + a.sent_inter, sent) << N << "x" << G;
    expect_same_traffic(a, b);
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
    expect_same_traffic(a, b);
  }
}

// MiCS's groups: the closed-form path's per-rank walk against ring_model_sent on the topology,
// for partitions inside a node, of one node, and spanning nodes.
TEST(PredictRing, PartitionGroupsAgreeBetweenClosedFormAndTopologyPaths) {
  const Cluster cluster = load_cluster("dgx-h100");
  for (auto [N, G, P] : {std::tuple{4, 2, 4}, std::tuple{4, 1, 2}, std::tuple{8, 4, 2},
                         std::tuple{12, 2, 6}, std::tuple{6, 3, 3}, std::tuple{8, 2, 8}}) {
    TrafficAccount closed(N, G, cluster, P);
    const Topology topo = Topology::virtual_nodes(N, 0, G).with_partition(P);
    TrafficAccount ring(topo, cluster);
    for (uint64_t count : {7ull, 13ull, 1000003ull, 5ull})
      for (GroupKind g : {GroupKind::kPartition, GroupKind::kReplica, GroupKind::kPartitionInter})
        for (CollKind k : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather}) {
          if (g == GroupKind::kPartitionInter && P % G != 0) continue;
          closed.add({k, g, count, DType::kF32});
          ring.add({k, g, count, DType::kF32});
        }
    const Traffic a = closed.finish(), b = ring.finish();
    const std::string at = std::to_string(N) + "/" + std::to_string(G) + "/" + std::to_string(P);
    EXPECT_GT(a.sent_intra + a.sent_inter, 0u) << at;
    expect_same_traffic(a, b, at);
  }
}

TEST(PredictActivations, FormulaEqualsWhatGptModelAllocates) {
  for (AttentionKind att : {AttentionKind::kNaive, AttentionKind::kFused}) {
    for (const char* spec : {"tiny", "small", "3,48,6,20,97", "llama-tiny", "llama-tiny-pad"}) {
      for (int batch : {1, 3}) {
        GptConfig c = parse_model(spec);
        c.attention = att;
        auto dev = make_cpu_device();
        MemoryTracker mem(dev->allocator());
        GptModel model(c, batch, *dev, mem);
        EXPECT_EQ(activation_bytes(c, batch), mem.current(MemCategory::kActivations))
            << spec << " " << attention_name(att);
      }
    }
  }
}

// The memory difference fused attention makes, term by term: per layer and once as backward
// scratch, B·NH·T² probabilities become B·NH·T log-sum-exps (fp32).
TEST(PredictActivations, FusedAttentionDropsTheProbabilities) {
  GptConfig c = parse_model("3,48,6,20,97");
  const int B = 2;
  const uint64_t NH = 6, T = 20, L = 3;
  c.attention = AttentionKind::kNaive;
  const uint64_t naive = activation_bytes(c, B);
  c.attention = AttentionKind::kFused;
  EXPECT_EQ(naive - activation_bytes(c, B), 4 * (L + 1) * B * NH * (T * T - T));
}

// A shared fabric (LinkClass::fabric_bytes_per_s): every node's boundary bytes move at once,
// each node at its 1/M share when that is below its own link, else at its link; intra-node
// collectives never touch it. The bandwidth term alone: latencies and efficiency set aside.
TEST(PredictRing, ASharedFabricGivesEachNodeItsShare) {
  Cluster cluster = load_cluster("dgx-h100");
  cluster.base_latency_s = cluster.intra.latency_s = cluster.inter.latency_s = 0;
  cluster.comm_efficiency = 1;
  const double link = cluster.inter.bw_bytes_per_s;
  for (int M : {2, 3, 5})
    for (GroupKind g : {GroupKind::kWorld, GroupKind::kInter, GroupKind::kIntra})
      for (double fabric : {0.0, link, 0.5 * link * M, 4.0 * link * M}) {
        Cluster shared = cluster;
        shared.inter.fabric_bytes_per_s = fabric;
        const int G = 4, N = M * G;
        TrafficAccount alone(N, G, cluster), fab(N, G, shared);
        const PredictedCall call{CollKind::kAllGather, g, 1u << 24, DType::kF32};
        const double t = alone.add(call), f = fab.add(call);
        const double share = fabric > 0 ? std::min(link, fabric / M) : link;
        // the inter hop sets the pace of these groups on dgx-h100 (NVLink is faster)
        const double want = g == GroupKind::kIntra ? t : t * link / share;
        EXPECT_NEAR(f, want, 1e-9 * want) << "M=" << M << " group " << int(g) << " fabric "
                                          << fabric;
      }
}

// One rank per node: a ring has no hop inside a node, so the node link's bandwidth (here
// 1000x slower than the network's) must not set the pace of a world collective.
TEST(PredictRing, OneRankPerNodeHasNoHopInsideANode) {
  Cluster cluster = load_cluster("dgx-h100");
  cluster.base_latency_s = cluster.intra.latency_s = cluster.inter.latency_s = 0;
  cluster.comm_efficiency = 1;
  cluster.intra.bw_bytes_per_s = cluster.inter.bw_bytes_per_s / 1000;
  for (int M : {2, 3, 17}) {
    TrafficAccount account(M, 1, cluster);
    const uint64_t count = 1u << 24;
    const double t = account.add({CollKind::kReduceScatter, GroupKind::kWorld, count, DType::kF32});
    // a node sends its one rank's (M-1)/M of the buffer, over the network only
    const double want = double(count / M * (M - 1) * 4) / cluster.inter.bw_bytes_per_s;
    EXPECT_NEAR(t, want, 1e-6 * want) << "M=" << M;
  }
}

}  // namespace
}  // namespace sb
