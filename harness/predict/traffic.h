// Bytes and time of the collectives a strategy issues in one step, by the ledger's ring rules:
// a ring over the group's ranks in rank order, each rank's sends classed by the hop to its
// successor (harness/comm/ledger.h). Two ways to count, pinned equal by the tests: closed
// forms in O(1) per collective for consecutive virtual nodes (any scale), or ring_model_sent
// itself, rank by rank, for an arbitrary Topology (predict_for_run). Time is alpha-beta per
// link class; it is a model, the bytes are exact.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "harness/comm/ledger.h"
#include "harness/predict/cluster.h"
#include "harness/topology.h"

namespace sb {

// One collective as a strategy hands it to the Communicator (count: LedgerEntry's convention).
struct PredictedCall {
  CollKind kind = CollKind::kAllReduce;
  GroupKind group = GroupKind::kWorld;
  uint64_t count = 0;
  DType dtype = DType::kF32;
  int root = 0;  // broadcast/reduce root position
};

struct KindTotals {
  uint64_t count = 0, payload_bytes = 0, sent_bytes = 0;  // sent: summed over ranks
  double time_s = 0;
};

struct Traffic {
  uint64_t collectives = 0, payload_bytes = 0;      // per rank (every rank issues the same)
  uint64_t sent_intra = 0, sent_inter = 0;          // summed over ranks
  uint64_t max_rank_sent = 0;                       // max over ranks of the step's sends
  uint64_t max_rank_intra = 0, max_rank_inter = 0;  // max over ranks, by hop class
  std::array<std::array<KindTotals, kNumGroupKinds>, kNumCollKinds> by_kind{};  // [kind][group]
  std::array<uint64_t, 64> size_histogram{};  // count by payload rounded up to 2^i
  double comm_s = 0;                          // every collective back to back
};

class TrafficAccount {
 public:
  // Consecutive virtual nodes of `ranks_per_node` (Topology::virtual_nodes), partitions of
  // `partition` consecutive ranks (0: the node).
  TrafficAccount(int world, int ranks_per_node, const Cluster& cluster, int partition = 0);
  // Any topology: every rank's sends from ring_model_sent (O(world^2) per collective).
  TrafficAccount(const Topology& topo, const Cluster& cluster);
  // Adds one collective; returns its time (the simulated backend's cost function).
  double add(const PredictedCall& c);
  // Of the last collective's time, the share its CPU work takes: 1 but where bytes wait on an
  // inter-node link slower than its fabric, the rate the cores move them at (namespace hosts
  // on a shaped link).
  double last_cpu_share() const { return last_cpu_share_; }
  // The last collective's time while the ranks' compute runs beside it on shared cores: its
  // CPU work and latency plus the cluster's beside_compute waits for its ring steps, at least
  // its time alone (a link's wait hides the scheduling waits: TCP's buffers keep it busy).
  double last_beside_compute_s() const { return last_beside_s_; }
  Traffic finish() const;

 private:
  int n_of(GroupKind g) const;
  double call_time(const PredictedCall& c, uint64_t max_rank_bytes, uint64_t node_inter,
                   double inter_senders);
  // Closed-form path, partition groups: every rank's sends by its position and successor, O(N).
  void add_partition_call(const PredictedCall& c, uint64_t& sent, uint64_t& max_rank,
                          uint64_t& node_inter, double& senders);
  // Closed-form path, all-to-all: every rank's peers on and off its node, O(N).
  void add_all_to_all_call(const PredictedCall& c, uint64_t& sent, uint64_t& max_rank,
                           uint64_t& node_inter);
  int N_, G_, M_, P_;
  const Cluster& cluster_;
  const Topology* topo_ = nullptr;
  std::vector<Topology> rank_topos_;     // topology path: the same topology seen from each rank
  std::vector<uint64_t> intra_, inter_;  // topology path: per rank
  // Closed-form path: per group kind, bytes every position sends plus a difference array of
  // the position-dependent part (uneven ring chunks).
  std::array<uint64_t, 3> base_{};
  std::array<std::vector<int64_t>, 3> diff_;
  Traffic t_;
  double last_cpu_share_ = 1;
  double last_beside_s_ = 0;
};

// Per-position bytes of one ring collective: what ring_model_sent returns, in closed form.
uint64_t ring_sent_closed_form(CollKind kind, uint64_t count, size_t elem_bytes, int n, int i,
                               int root = 0);

}  // namespace sb
