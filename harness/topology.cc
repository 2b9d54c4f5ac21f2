// Builds the groups from the node map; validation of the map is a fatal check.
#include "harness/topology.h"

#include <algorithm>
#include <set>

#include "harness/common/check.h"

namespace sb {

const char* group_name(GroupKind g) {
  switch (g) {
    case GroupKind::kWorld: return "world";
    case GroupKind::kIntra: return "intra";
    case GroupKind::kInter: return "inter";
    case GroupKind::kPartition: return "partition";
    case GroupKind::kReplica: return "replica";
    case GroupKind::kPartitionInter: return "partition_inter";
  }
  return "?";
}

Topology::Topology(int world_size, int rank, std::vector<int> node_of_rank)
    : world_size_(world_size), rank_(rank), node_of_rank_(std::move(node_of_rank)) {
  SB_CHECK(world_size_ >= 1 && rank_ >= 0 && rank_ < world_size_, "bad rank " << rank_);
  SB_CHECK(int(node_of_rank_.size()) == world_size_, "node map has wrong size");
  std::set<int> nodes(node_of_rank_.begin(), node_of_rank_.end());
  num_nodes_ = int(nodes.size());
  SB_CHECK(*nodes.begin() == 0 && *nodes.rbegin() == num_nodes_ - 1, "node ids must be 0..M-1");
  std::vector<std::vector<int>> members(num_nodes_);
  for (int r = 0; r < world_size_; ++r) members[node_of_rank_[r]].push_back(r);
  for (auto& m : members)
    SB_CHECK(m.size() == members[0].size(), "every node must hold the same number of ranks");
  const auto& mine = members[node()];
  local_rank_ = int(std::find(mine.begin(), mine.end(), rank_) - mine.begin());

  world_.kind = GroupKind::kWorld;
  for (int r = 0; r < world_size_; ++r) world_.ranks.push_back(r);
  world_.index = rank_;
  intra_.kind = GroupKind::kIntra;
  intra_.ranks = mine;
  intra_.index = local_rank_;
  inter_.kind = GroupKind::kInter;
  for (int n = 0; n < num_nodes_; ++n) inter_.ranks.push_back(members[n][local_rank_]);
  std::sort(inter_.ranks.begin(), inter_.ranks.end());
  inter_.index = int(std::find(inter_.ranks.begin(), inter_.ranks.end(), rank_) - inter_.ranks.begin());
  *this = with_partition(0);
}

template <class Pick>
Group Topology::members(GroupKind kind, Pick pick) const {
  Group g;
  g.kind = kind;
  for (int r = 0; r < world_size_; ++r)
    if (pick(r)) g.ranks.push_back(r);
  g.index = int(std::find(g.ranks.begin(), g.ranks.end(), rank_) - g.ranks.begin());
  return g;
}

Topology Topology::with_partition(int size) const {
  const int P = size > 0 ? size : ranks_per_node();
  SB_CHECK(world_size_ % P == 0, "partition of " << P << " does not divide the world size "
                                                 << world_size_);
  Topology t = *this;
  const int mine = rank_ / P;
  t.partition_ = members(GroupKind::kPartition, [&](int r) { return r / P == mine; });
  t.replica_ = members(GroupKind::kReplica, [&](int r) { return r % P == rank_ % P; });
  std::vector<int> local(size_t(world_size_), 0), seen(size_t(num_nodes_), 0);
  for (int r = 0; r < world_size_; ++r) local[r] = seen[node_of_rank_[r]]++;
  t.partition_inter_ = members(GroupKind::kPartitionInter, [&](int r) {
    return r / P == mine && local[r] == local_rank_;
  });
  return t;
}

Topology Topology::virtual_nodes(int world_size, int rank, int ranks_per_node) {
  SB_CHECK(ranks_per_node >= 1 && world_size % ranks_per_node == 0,
           "--ranks-per-node " << ranks_per_node << " must divide the world size " << world_size);
  std::vector<int> node_of(world_size);
  for (int r = 0; r < world_size; ++r) node_of[r] = r / ranks_per_node;
  return Topology(world_size, rank, std::move(node_of));
}

const Group& Topology::group(GroupKind g) const {
  switch (g) {
    case GroupKind::kWorld: return world_;
    case GroupKind::kIntra: return intra_;
    case GroupKind::kInter: return inter_;
    case GroupKind::kPartition: return partition_;
    case GroupKind::kReplica: return replica_;
    case GroupKind::kPartitionInter: return partition_inter_;
  }
  return world_;
}

}  // namespace sb
