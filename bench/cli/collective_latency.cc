// Run-start latency of the run's own collectives (see header).
#include "bench/cli/collective_latency.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "harness/comm/collective.h"
#include "harness/comm/communicator.h"
#include "harness/comm/ledger.h"
#include "harness/device/cpu_device.h"

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

// The compute of the measurements beside it: 384^3 sgemms, ~1 ms each on one core.
class Sgemms {
 public:
  void run(int calls) {
    for (int i = 0; i < calls; ++i)
      dev_->gemm(false, false, kN, kN, kN, 1.0f, a_.data(), kN, b_.data(), kN, 0.0f, c_.data(),
                 kN);
  }

 private:
  static constexpr int kN = 384;
  std::unique_ptr<Device> dev_ = make_cpu_device();
  std::vector<float> a_ = std::vector<float>(kN * kN, 0.5f);
  std::vector<float> b_ = std::vector<float>(kN * kN, 0.25f), c_ = std::vector<float>(kN * kN);
};

// The 1 KiB rings while a thread of this rank runs sgemms without pause: every rank's, so the
// cores are as busy as in a step's compute.
void measure_beside_compute(Communicator& comm, int repeats, CollectiveLatency& l) {
  // jthread: stopped and joined on every exit, a throwing collective's too
  const std::jthread compute([](const std::stop_token& stop) {
    Sgemms sgemms;
    while (!stop.stop_requested()) sgemms.run(1);
  });
  l.world_beside_s = median_all_reduce(comm, GroupKind::kWorld, repeats);
  l.intra_beside_s = median_all_reduce(comm, GroupKind::kIntra, repeats);
}

// A 1 KiB world all-reduce right after 10 sgemms (~20 ms at 2 ranks a core), on every rank:
// its mean time. Ranks time-sliced on shared cores reach the collective apart (4-17 ms mean
// waits after 2-100 ms of compute on 4 ranks over 2 cores), so the first there waits for the
// last; the mean, not the median, as a step pays every wait.
// Sets l.world_after_compute_s and l.burst_s (this rank's means).
void mean_all_reduce_after_compute(Communicator& comm, int repeats, CollectiveLatency& l) {
  Sgemms sgemms;
  std::vector<float> buf(kCount, 1.0f);
  double wait = 0, burst = 0;
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    sgemms.run(10);
    const auto t1 = Clock::now();
    comm.all_reduce(buf.data(), kCount, DType::kF32, GroupKind::kWorld, "latency calibration");
    burst += std::chrono::duration<double>(t1 - t0).count();
    wait += std::chrono::duration<double>(Clock::now() - t1).count();
  }
  l.world_after_compute_s = wait / repeats;
  l.burst_s = burst / repeats;
}

// base + steps x step through two rings' times (world: world_steps, node: node_steps), each
// at least 0; one ring (one node, or one rank per node): base 0.
std::pair<double, double> split_latency(double world_s, double node_s, double world_steps,
                                        double node_steps, bool two_rings) {
  if (!two_rings) return {0.0, world_s / world_steps};
  const double step = std::max(0.0, (world_s - node_s) / (world_steps - node_steps));
  return {std::max(0.0, node_s - node_steps * step), step};
}

}  // namespace

CollectiveLatency measure_collective_latency(MpiRuntime& mpi, const Topology& topo,
                                             CollectiveImpl impl, bool world_bandwidth,
                                             bool beside_compute, int repeats) {
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
    // 15: each takes 2-3 of the scheduler's ticks (8-24 ms at 4 ranks on 2 cores)
    if (beside_compute) {
      measure_beside_compute(comm, 15, l);
      mean_all_reduce_after_compute(comm, 15, l);
    }
  }
  l.world_after_compute_s = mpi.sum_over_ranks(l.world_after_compute_s) / topo.world_size();
  l.burst_s = mpi.sum_over_ranks(l.burst_s) / topo.world_size();
  l.world_beside_s = mpi.max_over_ranks(l.world_beside_s);
  l.intra_beside_s = mpi.max_over_ranks(l.intra_beside_s);
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
  // two rings of different lengths over the same hosts: base + steps x step each
  const bool two_rings = M > 1 && G > 1;
  const auto [base, step] = split_latency(world_t, l.intra_s, world_steps, node_steps, two_rings);
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
  std::string beside;
  if (l.world_beside_s > 0) {
    const auto [wait_base, wait_step] =
        split_latency(std::max(0.0, l.world_beside_s - l.world_s),
                      std::max(0.0, l.intra_beside_s - l.intra_s), world_steps, node_steps,
                      two_rings);
    c.beside_compute_base_s = wait_base;
    c.beside_compute_step_s = wait_step;
    c.after_compute_sync_s = std::max(0.0, l.world_after_compute_s - l.world_s);
    c.after_compute_burst_s = l.burst_s;
    beside = fmt::format("; beside a thread of sgemms on every rank: world {:.1f} ms, node "
                          "{:.1f} ms -> {:.2f} ms more per collective + {:.2f} ms per ring step; "
                          "right after 10 sgemms ({:.1f} ms) on every rank: world {:.1f} ms "
                          "(mean) -> {:.2f} ms waited for the last rank",
                          l.world_beside_s * 1e3, l.intra_beside_s * 1e3, wait_base * 1e3,
                          wait_step * 1e3, l.burst_s * 1e3, l.world_after_compute_s * 1e3,
                          c.after_compute_sync_s * 1e3);
  }
  return fmt::format("collective latency measured at start (a 1 KiB all-reduce of the run's "
                     "backend, median of {}, slowest rank): world {:.1f} us, node {:.1f} us -> "
                     "{:.1f} us per collective + {:.1f} us per ring step (+ the link's {:.1f} us "
                     "on inter-node steps); a 4 MiB all-reduce over {} ranks {:.2f} ms -> "
                     "{:.2f} GB/s per rank in shared memory",
                     l.repeats, l.world_s * 1e6, l.intra_s * 1e6, base * 1e6, step * 1e6,
                     link * 1e6, n, l.big_s * 1e3, bw / 1e9) + across + beside;
}

}  // namespace sb
