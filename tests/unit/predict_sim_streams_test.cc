// The simulated backend's second comm stream: one SimBackend per CommStream on one clock. An
// op on the side stream starts at max(issue, its stream free, its input done), so HYBRID_SHARD's
// all-reduce and the next all-gather start together after the reduce-scatter; with one stream
// the all-gather waits for the all-reduce. Where ranks outnumber cores, a kernel beside a
// collective gets the cores its CPU work leaves. Exact logical times, no MPI.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/predict/cluster.h"
#include "harness/predict/sim_backend.h"

namespace sb {
namespace {

struct SimRun {
  std::vector<LedgerEntry> entries;
  double end_s = 0;  // the compute clock after synchronize()
};

// reduce-scatter over the node, its all-reduce across nodes (kSide), an all-gather over the node
SimRun simulate(bool side_stream) {
  const Topology t = Topology::virtual_nodes(4, 0, 2);
  const Cluster cl = load_cluster("dgx-a100-80g");
  TrafficAccount account(t, cl);
  SimClock clock;
  Ledger ledger;
  std::vector<float> full(1 << 20), shard(1 << 19);
  {
    auto side = side_stream ? std::make_unique<SimBackend>(clock, &account, CommStream::kSide)
                            : nullptr;
    Communicator comm(t, std::make_unique<SimBackend>(clock, &account), ledger, std::move(side));
    CommHandle rs = comm.reduce_scatter_async(full.data(), shard.data(), shard.size(),
                                              DType::kF32, GroupKind::kIntra);
    comm.all_reduce_async(shard.data(), shard.size(), DType::kF32, GroupKind::kInter, "ar",
                          CommStream::kSide, rs);
    comm.all_gather_async(shard.data(), full.data(), shard.size(), DType::kF32,
                          GroupKind::kIntra);
    comm.synchronize();
  }
  return {ledger.entries(), clock.compute_s};
}

TEST(SimStreams, SideAllReduceStartsAfterItsInputAndBesideTheNextAllGather) {
  const SimRun r = simulate(true);
  ASSERT_EQ(r.entries.size(), 3u);
  const LedgerEntry &rs = r.entries[0], &ar = r.entries[1], &ag = r.entries[2];
  EXPECT_GT(rs.end_ns, 0);
  EXPECT_EQ(ar.stream, 1);
  EXPECT_EQ(ar.start_ns, rs.end_ns);  // waits for its input only
  EXPECT_EQ(ag.start_ns, rs.end_ns);  // not behind the all-reduce
  EXPECT_NEAR(r.end_s * 1e9, double(std::max(ar.end_ns, ag.end_ns)), 1.0);
}

TEST(SimStreams, WithOneStreamTheAllGatherQueuesBehindTheAllReduce) {
  const SimRun r = simulate(false);
  ASSERT_EQ(r.entries.size(), 3u);
  const LedgerEntry &rs = r.entries[0], &ar = r.entries[1], &ag = r.entries[2];
  EXPECT_EQ(ar.stream, 0);
  EXPECT_EQ(ar.start_ns, rs.end_ns);
  EXPECT_EQ(ag.start_ns, ar.end_ns);
  // the same collectives, durations and bytes either way; only the timeline differs
  const SimRun two = simulate(true);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r.entries[i].end_ns - r.entries[i].start_ns,
              two.entries[i].end_ns - two.entries[i].start_ns);
    EXPECT_EQ(r.entries[i].sent.total(), two.entries[i].sent.total());
  }
  EXPECT_GT(r.end_s, two.end_s);
}

// Ranks outnumbering cores (SimClock::serial): a kernel progresses at 1 - the CPU share of the
// collectives in flight, summed over both streams and capped at 1 (then it waits).
TEST(SimStreams, SerialKernelsGetWhatTheCollectivesCpuShareLeaves) {
  SimClock c;
  c.serial = true;
  EXPECT_DOUBLE_EQ(c.serial_kernel_end(1.0, 0.5), 1.5);  // nothing in flight
  c.comm_windows = {{1.0, 2.0, 1.0}};
  EXPECT_DOUBLE_EQ(c.serial_kernel_end(1.0, 0.5), 2.5);  // waits for the cores, then runs
  c.comm_windows = {{1.0, 2.0, 0.5}};
  EXPECT_DOUBLE_EQ(c.serial_kernel_end(1.0, 0.25), 1.5);  // half the cores
  EXPECT_DOUBLE_EQ(c.serial_kernel_end(1.0, 1.0), 2.5);   // 0.5 beside, 0.5 after
  EXPECT_DOUBLE_EQ(c.serial_kernel_end(0.0, 1.5), 2.0);   // 1.0 before, 0.5 beside
  c.comm_windows = {{1.0, 3.0, 0.6}, {2.0, 3.0, 0.6}};
  EXPECT_NEAR(c.serial_kernel_end(1.0, 1.0), 3.6, 1e-12);  // 0.4 done, then none until 3
  c.serial_kernel_end(3.5, 0.1);
  EXPECT_TRUE(c.comm_windows.empty()) << "collectives over before the kernel are dropped";
}

// A collective across namespace hosts on a shaped link: every node's boundary bytes cost the
// machine's cores one core at each end of a stream per stream_bytes_per_s, spread over its
// cores; the rest of the link's time is a wait. No stream rate (a NIC moves the bytes), or a
// link the cores cannot outrun: the CPU share is 1.
TEST(SimStreams, ACollectiveOnAShapedLinkTakesTheCoresItsTcpCostsForItsTime) {
  Cluster cl = load_cluster("dgx-a100-80g");
  cl.host_cores = 2;
  cl.inter = LinkClass{25e6, 20e-6, false};  // 0.2 Gb/s per host
  cl.inter.fabric_bytes_per_s = 1e9;         // all hosts' TCP at once on the machine's cores
  cl.inter.stream_bytes_per_s = 600e6;       // one stream alone
  const double eff = cl.comm_efficiency;
  TrafficAccount account(4, 2, cl);
  const uint64_t count = 1 << 20;
  const double S = 4.0 * count, node_inter = 2 * S;  // 2 inter rings of 2: S per rank
  const double t = account.add({CollKind::kAllReduce, GroupKind::kInter, count, DType::kF32});
  const double latency = t - node_inter / (25e6 * eff);
  EXPECT_GT(latency, 0);
  const double core_s = 2 * node_inter * 2 / 600e6;  // both ends, both nodes
  EXPECT_NEAR(account.last_cpu_share(), (latency + core_s / 2) / t, 1e-12);
  EXPECT_LT(account.last_cpu_share(), 0.2);
  account.add({CollKind::kAllReduce, GroupKind::kIntra, count, DType::kF32});
  EXPECT_DOUBLE_EQ(account.last_cpu_share(), 1.0);
  cl.inter.bw_bytes_per_s = 5e9;  // faster than the cores move TCP
  TrafficAccount fast(4, 2, cl);
  fast.add({CollKind::kAllReduce, GroupKind::kInter, count, DType::kF32});
  EXPECT_DOUBLE_EQ(fast.last_cpu_share(), 1.0);
  cl.inter.bw_bytes_per_s = 25e6;
  cl.inter.stream_bytes_per_s = 0;
  TrafficAccount nic(4, 2, cl);
  nic.add({CollKind::kAllReduce, GroupKind::kInter, count, DType::kF32});
  EXPECT_DOUBLE_EQ(nic.last_cpu_share(), 1.0);
}

}  // namespace
}  // namespace sb
