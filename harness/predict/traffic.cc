// Ring accounting and alpha-beta time of predicted collectives (see header).
//
// Per position, position_sent_elements (harness/comm/collective.h, the one place the bytes of
// each kind are written; chunk c has len(c) = count/n + [c < count % n] elements). The account
// below keeps the position-dependent part as a difference array, so one collective costs O(1)
// at any world.
#include "harness/predict/traffic.h"

#include <algorithm>
#include <bit>

#include "harness/common/check.h"

namespace sb {
namespace {

int bit_width_of(uint64_t bytes) {  // index of the power of two >= bytes (the run's histogram)
  return bytes <= 1 ? 0 : std::min(63, int(std::bit_width(bytes - 1)));
}

}  // namespace

uint64_t ring_sent_closed_form(CollKind kind, uint64_t count, size_t elem_bytes, int n, int i,
                               int root) {
  return position_sent_elements(kind, count, n, i, root) * elem_bytes;
}

TrafficAccount::TrafficAccount(int world, int ranks_per_node, const Cluster& cluster,
                               int partition)
    : N_(world),
      G_(ranks_per_node),
      M_(world / ranks_per_node),
      P_(partition > 0 ? partition : ranks_per_node),
      cluster_(cluster),
      intra_(size_t(world), 0),
      inter_(size_t(world), 0) {
  SB_CHECK(world >= 1 && ranks_per_node >= 1 && world % ranks_per_node == 0,
           "world " << world << " is not a whole number of nodes of " << ranks_per_node);
  SB_CHECK(world % P_ == 0, "partition of " << P_ << " does not divide the world " << world);
  diff_[int(GroupKind::kWorld)].assign(size_t(N_) + 1, 0);
  diff_[int(GroupKind::kIntra)].assign(size_t(G_) + 1, 0);
  diff_[int(GroupKind::kInter)].assign(size_t(M_) + 1, 0);
}

TrafficAccount::TrafficAccount(const Topology& topo, const Cluster& cluster)
    : N_(topo.world_size()),
      G_(topo.ranks_per_node()),
      M_(topo.num_nodes()),
      P_(topo.partition_size()),
      cluster_(cluster),
      topo_(&topo),
      intra_(size_t(N_), 0),
      inter_(size_t(N_), 0) {
  std::vector<int> node(static_cast<size_t>(N_), 0);
  for (int r = 0; r < N_; ++r) node[r] = topo.node_of(r);
  for (int r = 0; r < N_; ++r) rank_topos_.push_back(Topology(N_, r, node).with_partition(P_));
}

int TrafficAccount::n_of(GroupKind g) const {
  switch (g) {
    case GroupKind::kWorld: return N_;
    case GroupKind::kIntra: return G_;
    case GroupKind::kInter: return M_;
    case GroupKind::kPartition: return P_;
    case GroupKind::kReplica: return N_ / P_;
    case GroupKind::kPartitionInter: return P_ % G_ == 0 ? P_ / G_ : 1;
  }
  return 1;
}

// Consecutive nodes of G and partitions of P: rank r's position in its group and its ring
// successor, so each rank's sends come from ring_sent_closed_form and the successor's node.
void TrafficAccount::add_partition_call(const PredictedCall& c, uint64_t& sent, uint64_t& max_rank,
                                        uint64_t& node_inter, double& senders) {
  const int n = n_of(c.group);
  const size_t e = dtype_bytes(c.dtype);
  uint64_t inter_sum = 0, inter_ranks = 0;
  for (int r = 0; r < N_; ++r) {
    const int base = r / P_ * P_;
    int i = 0, next = r;
    if (c.group == GroupKind::kPartition) {
      i = r - base;
      next = base + (i + 1) % n;
    } else if (c.group == GroupKind::kReplica) {
      i = r / P_;
      next = r % P_ + (i + 1) % n * P_;
    } else {  // kPartitionInter: my partition's ranks with my local rank (P a multiple of G)
      i = n > 1 ? (r - base) / G_ : 0;
      next = n > 1 ? base + r % G_ + (i + 1) % n * G_ : r;
    }
    const uint64_t b = ring_sent_closed_form(c.kind, c.count, e, n, i, c.root);
    const bool inter = r / G_ != next / G_;
    (inter ? inter_ : intra_)[size_t(r)] += b;
    sent += b;
    max_rank = std::max(max_rank, b);
    if (inter) inter_sum += b, inter_ranks += b > 0;
  }
  node_inter = inter_sum / uint64_t(M_);
  senders = std::max(1.0, double(inter_ranks) / M_);
}

// Rank r's group is the progression start + k*stride, k < n (consecutive nodes of G, partitions
// of P consecutive ranks); its members on r's node are those in [node*G, node*G + G). Each
// sends a block of count/n to each of the other n-1 (ring_model_sent's all-to-all rule).
void TrafficAccount::add_all_to_all_call(const PredictedCall& c, uint64_t& sent,
                                         uint64_t& max_rank, uint64_t& node_inter) {
  const int64_t n = n_of(c.group);
  const uint64_t block = alltoall_block_elements(c.count, int(n)) * dtype_bytes(c.dtype);
  uint64_t inter_sum = 0;
  for (int64_t r = 0; r < N_; ++r) {
    const int64_t nb = r / G_ * G_, base = r / P_ * P_;
    int64_t start = 0, stride = 1;
    switch (c.group) {
      case GroupKind::kWorld: break;
      case GroupKind::kIntra: start = nb; break;
      case GroupKind::kInter: start = r % G_, stride = G_; break;
      case GroupKind::kPartition: start = base; break;
      case GroupKind::kReplica: start = r % P_, stride = P_; break;
      case GroupKind::kPartitionInter: start = n > 1 ? base + r % G_ : r, stride = G_; break;
    }
    const auto ceil_div_s = [](int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -(-a / b); };
    const auto floor_div_s = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
    const int64_t k0 = std::max<int64_t>(0, ceil_div_s(nb - start, stride));
    const int64_t k1 = std::min<int64_t>(n - 1, floor_div_s(nb + G_ - 1 - start, stride));
    const uint64_t on_node = uint64_t(std::max<int64_t>(0, k1 - k0 + 1));
    const uint64_t in = (on_node - 1) * block, out = (uint64_t(n) - on_node) * block;
    intra_[size_t(r)] += in;
    inter_[size_t(r)] += out;
    sent += in + out;
    max_rank = std::max(max_rank, in + out);
    inter_sum += out;
  }
  node_inter = inter_sum / uint64_t(M_);
}

double TrafficAccount::add(const PredictedCall& c) {
  const uint64_t e = dtype_bytes(c.dtype), payload = c.count * e;
  KindTotals& k = t_.by_kind[int(c.kind)][int(c.group)];
  t_.collectives += 1;
  t_.payload_bytes += payload;
  t_.size_histogram[bit_width_of(payload)] += 1;
  k.count += 1;
  k.payload_bytes += payload;
  const int n = n_of(c.group);
  const CollectiveSpec& spec = collective_spec(c.kind);
  last_cpu_share_ = 1;
  last_beside_s_ = 0;
  if (n <= 1 || spec.algo == CollAlgo::kNone) return 0;
  const uint64_t rem = c.count % uint64_t(n);
  uint64_t max_rank = max_position_sent_elements(c.kind, c.count, n) * e, sent = 0, node_inter = 0;
  // inter senders per node: one in a world ring; every rank in an all-to-all
  const bool a2a = spec.algo == CollAlgo::kPairwise;
  double senders = c.group == GroupKind::kWorld && !a2a ? 1.0 : double(G_);
  if (topo_ == nullptr && a2a) {
    max_rank = 0;
    add_all_to_all_call(c, sent, max_rank, node_inter);
  } else if (topo_ == nullptr && int(c.group) >= int(GroupKind::kPartition)) {
    max_rank = 0;
    add_partition_call(c, sent, max_rank, node_inter, senders);
  } else if (topo_ != nullptr) {
    uint64_t inter_sum = 0;
    max_rank = 0;
    for (int r = 0; r < N_; ++r) {
      const Topology& t = rank_topos_[size_t(r)];
      const HopBytes h =
          ring_model_sent(c.kind, size_t(c.count), c.dtype, t.group(c.group), t, c.root);
      intra_[size_t(r)] += h.intra;
      inter_[size_t(r)] += h.inter;
      sent += h.total();
      inter_sum += h.inter;
      max_rank = std::max(max_rank, h.total());
    }
    node_inter = inter_sum / uint64_t(M_);
  } else {
    const int g = int(c.group);
    std::vector<int64_t>& d = diff_[g];
    auto minus = [&](uint64_t lo, uint64_t hi, uint64_t v) {  // positions [lo, hi) send v less
      if (lo >= hi) return;
      d[lo] -= int64_t(v);
      d[hi] += int64_t(v);
    };
    base_[g] += max_rank;
    if (spec.idle == ChainIdle::kLast) minus(uint64_t(n) - 1, uint64_t(n), payload);
    if (spec.idle == ChainIdle::kRoot) minus(uint64_t(c.root), uint64_t(c.root) + 1, payload);
    if (spec.rs_pass) minus(0, rem, e);  // own chunk is one longer
    if (spec.ag_pass && rem > 0) {       // successor's chunk is longer
      minus(0, rem - 1, e);
      minus(uint64_t(n) - 1, uint64_t(n), e);
    }
    const uint64_t instances = c.group == GroupKind::kWorld ? 1 : uint64_t(N_ / n);
    sent = group_sent_elements(c.kind, c.count, n) * e * instances;
    if (M_ > 1 && c.group == GroupKind::kWorld) node_inter = max_rank;  // one boundary rank
    if (M_ > 1 && c.group == GroupKind::kInter) node_inter = uint64_t(G_) * max_rank;
  }
  k.sent_bytes += sent;
  const double time = call_time(c, max_rank, node_inter, senders);
  k.time_s += time;
  t_.comm_s += time;
  return time;
}

// Latency as NCCL's ring model (src/graph/tuning.cc, ncclTopoTuneModel): a base per collective
// plus one per ring step, the steps that cross a node boundary (M-1 per pass) at the network's
// latency and the others at the node link's. Bandwidth: a ring step moves one chunk over every
// hop at once, so the slower hop class sets the pace (nccl-tests PERFORMANCE.md): a rank's
// bytes over its node link, or a node's boundary bytes over the node's network bandwidth.
double TrafficAccount::call_time(const PredictedCall& c, uint64_t max_rank_bytes,
                                 uint64_t node_inter, double inter_senders) {
  const int n = n_of(c.group);
  const double passes = collective_spec(c.kind).passes;
  const bool partition = int(c.group) >= int(GroupKind::kPartition);
  const bool crosses = M_ > 1 && c.group != GroupKind::kIntra && (!partition || node_inter > 0);
  const double inter_steps = crosses ? passes * std::min(n - 1, M_ - 1) : 0.0;
  const double steps = passes * (n - 1);
  const double eff = cluster_.comm_efficiency;
  const double latency = cluster_.base_latency_s +
                         (steps - inter_steps) * cluster_.intra.latency_s +
                         inter_steps * cluster_.inter.latency_s;
  double bw_t = 0;
  if (c.group != GroupKind::kInter && G_ > 1)  // the hops inside a node (none: one rank each)
    bw_t = double(max_rank_bytes) / (cluster_.intra.bw_bytes_per_s * eff);
  double cpu_t = bw_t;
  if (crosses) {
    // Senders across the boundary per node: one in a world ring, all G in the inter rings.
    double node_bw =
        cluster_.inter.bw_bytes_per_s * eff * (cluster_.inter.per_rank ? inter_senders : 1.0);
    // Every node sends its boundary bytes at once: a shared fabric gives each its share.
    const double fabric_share = cluster_.inter.fabric_bytes_per_s * eff / M_;
    if (fabric_share > 0) node_bw = std::min(node_bw, fabric_share);
    bw_t = std::max(bw_t, double(node_inter) / node_bw);
    // Namespace hosts: every node's boundary bytes cost the machine's cores a core at each end
    // of a stream per stream_bytes_per_s; the rest of a slower link's time is a wait that
    // leaves the cores to the compute (used only where ranks outnumber cores, SimClock::serial).
    const double stream = cluster_.inter.stream_bytes_per_s;
    if (stream > 0 && cluster_.host_cores > 0)
      cpu_t = std::max(cpu_t, 2.0 * double(node_inter) * M_ / stream / cluster_.host_cores);
    else
      cpu_t = bw_t;
  }
  last_cpu_share_ =
      latency + bw_t > 0 ? std::min(1.0, (latency + cpu_t) / (latency + bw_t)) : 1.0;
  const double waits = cluster_.beside_compute_base_s + steps * cluster_.beside_compute_step_s;
  last_beside_s_ = std::max(latency + bw_t, latency + std::min(cpu_t, bw_t) + waits);
  return latency + bw_t;
}

Traffic TrafficAccount::finish() const {
  Traffic t = t_;
  t.sent_intra = t.sent_inter = t.max_rank_sent = t.max_rank_intra = t.max_rank_inter = 0;
  auto fold = [&](uint64_t in, uint64_t out) {
    t.sent_intra += in;
    t.sent_inter += out;
    t.max_rank_sent = std::max(t.max_rank_sent, in + out);
    t.max_rank_intra = std::max(t.max_rank_intra, in);
    t.max_rank_inter = std::max(t.max_rank_inter, out);
  };
  if (topo_ != nullptr) {
    for (int r = 0; r < N_; ++r) fold(intra_[size_t(r)], inter_[size_t(r)]);
    return t;
  }
  std::array<std::vector<uint64_t>, 3> at;  // per position: base + prefix of the differences
  for (int g = 0; g < 3; ++g) {
    int64_t run = 0;
    at[g].resize(diff_[g].size() - 1);
    for (size_t p = 0; p + 1 < diff_[g].size(); ++p) {
      run += diff_[g][p];
      at[g][p] = uint64_t(int64_t(base_[g]) + run);
    }
  }
  for (int r = 0; r < N_; ++r) {
    const uint64_t w = at[0][size_t(r)], in = at[1][size_t(r % G_)], out = at[2][size_t(r / G_)];
    const bool world_hop_inter = M_ > 1 && (r + 1) % G_ == 0;
    fold(intra_[size_t(r)] + in + (world_hop_inter ? 0 : w),
         inter_[size_t(r)] + out + (world_hop_inter ? w : 0));
  }
  return t;
}

}  // namespace sb
