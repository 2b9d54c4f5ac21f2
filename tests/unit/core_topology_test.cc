// Topology: the three groups (world, intra-node, inter-node) and local ranks for a world of 4
// under every virtual-node shape, plus an interleaved node map. Pure: no MPI.
#include <gtest/gtest.h>

#include <vector>

#include "harness/topology.h"

namespace sb {
namespace {

using V = std::vector<int>;

TEST(Topology, DefaultIsOneRankOneNode) {
  Topology t;
  EXPECT_EQ(t.world_size(), 1);
  EXPECT_EQ(t.num_nodes(), 1);
  EXPECT_EQ(t.world().ranks, V{0});
  EXPECT_EQ(t.intra().ranks, V{0});
  EXPECT_EQ(t.inter().ranks, V{0});
}

TEST(Topology, WorldFourOneRankPerNode) {
  for (int r = 0; r < 4; ++r) {
    Topology t = Topology::virtual_nodes(4, r, 1);
    EXPECT_EQ(t.num_nodes(), 4);
    EXPECT_EQ(t.ranks_per_node(), 1);
    EXPECT_EQ(t.node(), r);
    EXPECT_EQ(t.local_rank(), 0);
    EXPECT_EQ(t.world().ranks, (V{0, 1, 2, 3}));
    EXPECT_EQ(t.world().index, r);
    EXPECT_EQ(t.intra().ranks, V{r});
    EXPECT_EQ(t.intra().index, 0);
    EXPECT_EQ(t.inter().ranks, (V{0, 1, 2, 3}));
    EXPECT_EQ(t.inter().index, r);
  }
}

TEST(Topology, WorldFourTwoRanksPerNode) {
  const V intra[4] = {{0, 1}, {0, 1}, {2, 3}, {2, 3}};
  const V inter[4] = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
  for (int r = 0; r < 4; ++r) {
    Topology t = Topology::virtual_nodes(4, r, 2);
    EXPECT_EQ(t.num_nodes(), 2);
    EXPECT_EQ(t.ranks_per_node(), 2);
    EXPECT_EQ(t.node(), r / 2);
    EXPECT_EQ(t.local_rank(), r % 2);
    EXPECT_EQ(t.intra().ranks, intra[r]);
    EXPECT_EQ(t.intra().index, r % 2);
    EXPECT_EQ(t.inter().ranks, inter[r]);
    EXPECT_EQ(t.inter().index, r / 2);
    EXPECT_EQ(t.group(GroupKind::kIntra).kind, GroupKind::kIntra);
    EXPECT_EQ(t.group(GroupKind::kInter).kind, GroupKind::kInter);
    EXPECT_TRUE(t.same_node(0, 1));
    EXPECT_FALSE(t.same_node(1, 2));
  }
}

TEST(Topology, WorldFourOneNode) {
  for (int r = 0; r < 4; ++r) {
    Topology t = Topology::virtual_nodes(4, r, 4);
    EXPECT_EQ(t.num_nodes(), 1);
    EXPECT_EQ(t.local_rank(), r);
    EXPECT_EQ(t.intra().ranks, (V{0, 1, 2, 3}));
    EXPECT_EQ(t.intra().index, r);
    EXPECT_EQ(t.inter().ranks, V{r});
    EXPECT_EQ(t.inter().index, 0);
  }
}

TEST(Topology, InterleavedNodeMapKeepsRankOrder) {
  // Ranks 0,2 on node 0 and 1,3 on node 1 (a round-robin launcher): groups stay ascending.
  for (int r = 0; r < 4; ++r) {
    Topology t(4, r, V{0, 1, 0, 1});
    EXPECT_EQ(t.node(), r % 2);
    EXPECT_EQ(t.local_rank(), r / 2);
    EXPECT_EQ(t.intra().ranks, (r % 2 == 0 ? V{0, 2} : V{1, 3}));
    EXPECT_EQ(t.inter().ranks, (r / 2 == 0 ? V{0, 1} : V{2, 3}));
    EXPECT_EQ(t.inter().index, r % 2);
  }
}

TEST(Topology, GroupNames) {
  EXPECT_STREQ(group_name(GroupKind::kWorld), "world");
  EXPECT_STREQ(group_name(GroupKind::kIntra), "intra");
  EXPECT_STREQ(group_name(GroupKind::kInter), "inter");
}

TEST(TopologyDeathTest, RanksPerNodeMustDivideWorld) {
  EXPECT_DEATH(Topology::virtual_nodes(4, 0, 3), "must divide");
}

}  // namespace
}  // namespace sb
