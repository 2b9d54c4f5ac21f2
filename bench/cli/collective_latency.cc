// Run-start latency of the run's own collectives (see header).
#include "bench/cli/collective_latency.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include <fmt/format.h>

#include "harness/comm/collective.h"
#include "harness/comm/communicator.h"
#include "harness/comm/ledger.h"

namespace sb {
namespace {

// 256 floats: every ring chunk holds elements at any world this runs at (an empty chunk's step
// would be skipped), and 1 KiB moves in well under a microsecond at shared-memory bandwidth.
constexpr size_t kCount = 256;
constexpr size_t kBigCount = size_t(1) << 20;  // 4 MiB: the bytes, not the steps, set its time
constexpr size_t kWorldBigCount = size_t(4) << 20;  // 16 MiB: ~0.1 s across a 4 Gb/s veth

double median_all_reduce(Communicator& comm, GroupKind g, int repeats, size_t count = kCount) {
  if (comm.group(g).size() <= 1) return 0;
  std::vector<float> buf(count, 1.0f);
  std::vector<double> t;
  comm.all_reduce(buf.data(), count, DType::kF32, g, "latency calibration");  // warm-up
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    comm.all_reduce(buf.data(), count, DType::kF32, g, "latency calibration");
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

CollectiveLatency measure_collective_latency(MpiRuntime& mpi, const Topology& topo,
                                             CollectiveImpl impl, bool world_bandwidth,
                                             int repeats) {
  Ledger scratch;
  CollectiveLatency l;
  l.repeats = repeats;
  {
    Communicator comm(topo, make_mpi_backend(topo, impl), scratch);
    l.world_s = median_all_reduce(comm, GroupKind::kWorld, repeats);
    l.intra_s = median_all_reduce(comm, GroupKind::kIntra, repeats);
    // the shared-memory bandwidth: the node's ring (the world's between virtual nodes when a
    // node holds one rank), 4 MiB, against its 1 KiB time
    l.big_group = topo.ranks_per_node() > 1 ? GroupKind::kIntra : GroupKind::kWorld;
    // 15: a few of them wait 4-16 ms for a peer to be scheduled (the scheduler's ticks); a
    // median of 5 was one of those in some runs (0.26 GB/s against 1.5-3 GB/s)
    l.big_s = median_all_reduce(comm, l.big_group, 15, kBigCount);
    if (world_bandwidth)
      l.world_big_s = median_all_reduce(comm, GroupKind::kWorld, 3, kWorldBigCount);
  }
  if (world_bandwidth) l.world_big_s = mpi.max_over_ranks(l.world_big_s);  // every rank's flag
  l.big_s = mpi.max_over_ranks(l.big_s);
  // the slowest rank's, so every rank's prediction uses one figure
  l.world_s = mpi.max_over_ranks(l.world_s);
  l.intra_s = mpi.max_over_ranks(l.intra_s);
  return l;
}

std::string apply_collective_latency(Cluster& c, const CollectiveLatency& l, const Topology& topo,
                                     double link_latency_s) {
  const int N = topo.world_size(), G = topo.ranks_per_node(), M = topo.num_nodes();
  if (N <= 1 || l.world_s <= 0) return "";
  const double link = M > 1 ? link_latency_s : 0;
  const double world_steps = 2.0 * (N - 1), node_steps = 2.0 * (G - 1);
  const double world_t = std::max(0.0, l.world_s - 2.0 * (M - 1) * link);
  double base = 0, step = world_t / world_steps;  // one node, or one rank per node: no split
  if (M > 1 && G > 1 && l.intra_s > 0) {
    // two rings of different lengths over the same hosts: base + steps x step each
    step = std::max(0.0, (world_t - l.intra_s) / (world_steps - node_steps));
    base = std::max(0.0, l.intra_s - node_steps * step);
  }
  c.base_latency_s = base;
  c.intra.latency_s = step;
  c.inter.latency_s = step + link;
  // bandwidth: the busiest rank's bytes of the 4 MiB all-reduce (collective.h) over the time
  // it took beyond the same ring's 1 KiB one; between virtual nodes the "network" is the same
  // shared memory, with --hosts netns it stays the probe's
  const int n = l.big_group == GroupKind::kIntra ? G : N;
  const double small_s = l.big_group == GroupKind::kIntra ? l.intra_s : l.world_s;
  const double bytes =
      4.0 * double(max_position_sent_elements(CollKind::kAllReduce, kBigCount, n));
  double bw = 0;
  if (n > 1 && l.big_s > small_s) {
    bw = bytes / (l.big_s - small_s);
    c.intra.bw_bytes_per_s = bw;
    if (link_latency_s <= 0) c.inter.bw_bytes_per_s = bw;
  }
  std::string across;
  if (l.world_big_s > l.world_s && M > 1) {
    // every rank of the world ring sends its share each step; a host's boundary rank sends
    // to the next host, all boundaries at once
    const double boundary =
        4.0 * double(max_position_sent_elements(CollKind::kAllReduce, kWorldBigCount, N));
    const double inter_bw = boundary / (l.world_big_s - l.world_s);
    c.inter.bw_bytes_per_s = inter_bw;
    c.inter.per_rank = false;
    c.inter.fabric_bytes_per_s = M * inter_bw;
    across = fmt::format("; a 16 MiB all-reduce over the world {:.1f} ms -> {:.2f} Gb/s across "
                         "each host's unshaped link (MPI's TCP, every boundary at once)",
                         l.world_big_s * 1e3, inter_bw * 8 / 1e9);
  }
  return fmt::format("collective latency measured at start (a 1 KiB all-reduce of the run's "
                     "backend, median of {}, slowest rank): world {:.1f} us, node {:.1f} us -> "
                     "{:.1f} us per collective + {:.1f} us per ring step (+ the link's {:.1f} us "
                     "on inter-node steps); a 4 MiB all-reduce over {} ranks {:.2f} ms -> "
                     "{:.2f} GB/s per rank in shared memory",
                     l.repeats, l.world_s * 1e6, l.intra_s * 1e6, base * 1e6, step * 1e6,
                     link * 1e6, n, l.big_s * 1e3, bw / 1e9) + across;
}

}  // namespace sb
