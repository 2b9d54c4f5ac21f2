// The all-to-all in the predictor's byte account: the closed-form path's per-rank walk (peers of
// each rank on and off its node) equals ring_model_sent's per-peer rule on the topology, for the
// node groups and the partition groups, and each rank sends (n-1)/n of its buffer.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "harness/comm/ledger.h"
#include "harness/predict/cluster.h"
#include "harness/predict/traffic.h"
#include "tests/unit/traffic_test_util.h"

namespace sb {
namespace {

TEST(PredictAllToAll, ClosedFormAndTopologyPathsAgree) {
  const Cluster cluster = load_cluster("dgx-h100");
  for (auto [N, G, P] : {std::tuple{4, 2, 4}, std::tuple{4, 1, 2}, std::tuple{8, 4, 2},
                         std::tuple{12, 2, 6}, std::tuple{6, 3, 3}, std::tuple{8, 2, 8},
                         std::tuple{3, 3, 3}, std::tuple{6, 2, 2}}) {
    TrafficAccount closed(N, G, cluster, P);
    const Topology topo = Topology::virtual_nodes(N, 0, G).with_partition(P);
    TrafficAccount ring(topo, cluster);
    uint64_t want_total = 0;
    for (GroupKind g : {GroupKind::kWorld, GroupKind::kIntra, GroupKind::kInter,
                        GroupKind::kPartition, GroupKind::kReplica, GroupKind::kPartitionInter}) {
      if (g == GroupKind::kPartitionInter && P % G != 0) continue;
      const uint64_t n = uint64_t(topo.group(g).size());
      for (uint64_t block : {1ull, 7ull, 1001ull}) {
        closed.add({CollKind::kAllToAll, g, n * block, DType::kBF16});
        ring.add({CollKind::kAllToAll, g, n * block, DType::kBF16});
        want_total += uint64_t(N) * (n - 1) * block * 2;  // every rank: n-1 blocks of bf16
      }
    }
    const Traffic a = closed.finish(), b = ring.finish();
    const std::string at = std::to_string(N) + "/" + std::to_string(G) + "/" + std::to_string(P);
    EXPECT_EQ(a.sent_intra + a.sent_inter, want_total) << at;
    expect_same_traffic(a, b, at);
  }
}

// Per peer: a world of 2 nodes of 2, rank 0 sends its block for rank 1 intra and those for
// ranks 2 and 3 inter; a group of one sends nothing.
TEST(PredictAllToAll, RingModelSentClassesEachPeer) {
  const Topology topo = Topology::virtual_nodes(4, 0, 2);
  const HopBytes w = ring_model_sent(CollKind::kAllToAll, 4 * 10, DType::kF32, topo.world(), topo);
  EXPECT_EQ(w.intra, 40u);
  EXPECT_EQ(w.inter, 80u);
  const HopBytes in = ring_model_sent(CollKind::kAllToAll, 2 * 10, DType::kI8, topo.intra(), topo);
  EXPECT_EQ(in.intra, 10u);
  EXPECT_EQ(in.inter, 0u);
  const Topology one = Topology::virtual_nodes(1, 0, 1);
  EXPECT_EQ(ring_model_sent(CollKind::kAllToAll, 9, DType::kF32, one.world(), one).total(), 0u);
  EXPECT_STREQ(coll_name(CollKind::kAllToAll), "all_to_all");
}

}  // namespace
}  // namespace sb
