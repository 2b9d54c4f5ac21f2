// Who is where: world size, my rank, the node of every rank, and the groups the strategies use
// (world, my node's ranks, the ranks sharing my local index across nodes; and MiCS's partition
// of P consecutive ranks, its replicas across partitions and its ranks on other nodes).
// Pure data: discovery from MPI lives in comm/mpi_runtime so this stays testable without MPI.
#pragma once

#include <string>
#include <vector>

namespace sb {

// kPartition: the P consecutive ranks of my partition (MiCS's shard group); kReplica: the ranks at
// my position in every partition; kPartitionInter: the ranks of my partition with my local rank
// (one per node it spans). P defaults to the node, where they equal kIntra, kInter and {me}.
enum class GroupKind { kWorld, kIntra, kInter, kPartition, kReplica, kPartitionInter };
constexpr int kNumGroupKinds = 6;
const char* group_name(GroupKind g);

// An ordered set of world ranks; the ring of a collective runs in this order.
struct Group {
  GroupKind kind = GroupKind::kWorld;
  std::vector<int> ranks;  // world ranks, ascending
  int index = 0;           // my position in `ranks`
  int size() const { return int(ranks.size()); }
};

class Topology {
 public:
  Topology() : Topology(1, 0, std::vector<int>{0}) {}
  // node_of_rank[r] = node id of world rank r (ids 0..M-1, every node the same size).
  Topology(int world_size, int rank, std::vector<int> node_of_rank);
  // Consecutive ranks form virtual nodes of `ranks_per_node` (the --ranks-per-node override).
  static Topology virtual_nodes(int world_size, int rank, int ranks_per_node);
  // This topology with partitions of `size` consecutive ranks (0: the node); size must divide
  // the world.
  Topology with_partition(int size) const;
  int partition_size() const { return partition_.size(); }

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  int node_of(int r) const { return node_of_rank_[r]; }
  int node() const { return node_of_rank_[rank_]; }
  int num_nodes() const { return num_nodes_; }
  int ranks_per_node() const { return world_size_ / num_nodes_; }
  int local_rank() const { return local_rank_; }
  bool same_node(int a, int b) const { return node_of_rank_[a] == node_of_rank_[b]; }

  const Group& group(GroupKind g) const;
  const Group& world() const { return world_; }
  const Group& intra() const { return intra_; }
  const Group& inter() const { return inter_; }
  const Group& partition() const { return partition_; }

 private:
  int world_size_, rank_, num_nodes_ = 1, local_rank_ = 0;
  std::vector<int> node_of_rank_;
  Group world_, intra_, inter_, partition_, replica_, partition_inter_;
  // The group of `kind` holding every world rank r with pick(r) true (ring in rank order).
  template <class Pick>
  Group members(GroupKind kind, Pick pick) const;
};

}  // namespace sb
