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

// Where collectives are timed beside compute (ranks outnumbering cores, with the run's waits
// measured): a collective is timed at issue as beside compute, its alone time stretched to its
// beside time; when the compute blocks on it, what is left of it and of what is queued before it
// runs at its alone rate. Exact logical times, no MPI.
TEST(SimStreams, ACollectiveBesideComputeIsRetimedAloneWhereTheComputeBlocksOnIt) {
  SimClock c;
  c.serial = c.beside_compute = true;
  double start = -1;
  const double a = c.issue(0, 0.0, 1.0, 4.0, 1.0, start);  // alone 1 s, beside compute 4 s
  EXPECT_DOUBLE_EQ(start, 0.0);
  EXPECT_DOUBLE_EQ(a, 4.0);
  ASSERT_EQ(c.comm_windows.size(), 1u);
  EXPECT_DOUBLE_EQ(c.comm_windows[0].cpu_share, 0.25) << "its CPU work over its time beside";
  c.compute_s = 2.0;  // half its beside time: half its work done, 0.5 s alone left
  EXPECT_DOUBLE_EQ(c.end_of(0, a), 4.0);
  EXPECT_DOUBLE_EQ(c.block_on(0, a), 2.5);
  EXPECT_DOUBLE_EQ(c.end_of(0, a), 2.5);
  EXPECT_DOUBLE_EQ(c.comm_free_s, 2.5);
  c.compute_s = 2.5;
  EXPECT_DOUBLE_EQ(c.block_on(0, a), 2.5) << "done: no wait";
  c.compute_s = 3.0;
  double s2 = 0;
  const double b = c.issue(0, 3.0, 1.0, 2.0, 1.0, s2);
  EXPECT_TRUE(c.queues[0].size() == 1 && s2 == 3.0) << "the ended one is dropped";
  EXPECT_DOUBLE_EQ(c.block_on(0, 99.0), 3.0) << "a key no longer queued has ended";
  EXPECT_DOUBLE_EQ(b, 5.0);
}

TEST(SimStreams, BlockingOnACollectiveRunsWhatIsQueuedBeforeItAndTheOtherStreamAlone) {
  SimClock c;
  c.serial = c.beside_compute = true;
  double s = 0;
  const double a = c.issue(0, 0.0, 1.0, 2.0, 1.0, s);  // 0 -> 2 beside
  const double b = c.issue(0, 0.0, 1.0, 2.0, 1.0, s);  // queued: 2 -> 4
  const double side = c.issue(1, 0.0, 3.0, 6.0, 1.0, s);  // the side stream: 0 -> 6
  const double after = c.issue(0, 0.0, 1.0, 2.0, 1.0, s);  // 4 -> 6
  EXPECT_DOUBLE_EQ(b, 4.0);
  EXPECT_DOUBLE_EQ(after, 6.0);
  c.compute_s = 1.0;  // a is half done
  EXPECT_DOUBLE_EQ(c.block_on(0, b), 2.5);  // a's 0.5 s left, then b's 1 s, alone
  EXPECT_DOUBLE_EQ(c.end_of(0, a), 1.5);
  // the side stream: 0.5 s of its 3 done by 1.0, alone until 2.5 (1.5 s), its last 1 s beside
  EXPECT_DOUBLE_EQ(side, 6.0);
  EXPECT_DOUBLE_EQ(c.end_of(1, side), 4.5);
  // queued after b: it starts when b ends and runs beside the compute that resumes
  EXPECT_DOUBLE_EQ(c.end_of(0, after), 4.5);
  EXPECT_DOUBLE_EQ(c.last_key(0), after);
  EXPECT_DOUBLE_EQ(c.comm_free_s, 4.5);
  EXPECT_DOUBLE_EQ(c.side_comm_free_s, 4.5);
  EXPECT_DOUBLE_EQ(c.comm_busy_s(), 1.5 + 1.0 + 2.0 + 4.5) << "as re-timed";
  c.compute_s = 5.0;
  c.issue(0, 5.0, 0.0, 0.0, 1.0, s);  // drops the four ended ones
  EXPECT_DOUBLE_EQ(c.comm_busy_s(), 9.0) << "what ended is kept";
}

// A side-stream collective that waits on a main-stream one starts where that one ends as
// re-timed; and a handle's key stays unique on its stream, though a later collective's end can
// come out equal to an earlier one's key after a re-time.
TEST(SimStreams, ReTimedInputsMoveTheirDependentsAndKeysStayUnique) {
  SimClock c;
  c.serial = c.beside_compute = true;
  double s = 0;
  const double a = c.issue(0, 0.0, 1.0, 2.0, 1.0, s);                 // main: 0 -> 2
  const double after = c.issue(0, 0.0, 1.0, 2.0, 1.0, s);             // main: 2 -> 4
  const double dep = c.issue(1, 0.0, 1.0, 2.0, 1.0, s, a);            // side, after a
  EXPECT_DOUBLE_EQ(s, 2.0);
  EXPECT_DOUBLE_EQ(dep, 4.0);
  c.compute_s = 1.0;
  EXPECT_DOUBLE_EQ(c.block_on(0, a), 1.5);  // a: 0.5 done, 0.5 alone
  ASSERT_EQ(c.queues[1].size(), 1u);
  EXPECT_DOUBLE_EQ(c.queues[1][0].start_s, 1.5) << "the side one starts when a now ends";
  EXPECT_DOUBLE_EQ(c.end_of(1, dep), 3.5);
  EXPECT_DOUBLE_EQ(c.end_of(0, after), 3.5);  // from 1.5, beside the resumed compute
  c.compute_s = 1.5;
  // ends at 3.5 + 0.5 = 4.0, the key `after` was issued with
  const double next = c.issue(0, 1.5, 0.5, 0.5, 1.0, s);
  EXPECT_GT(next, after);
  EXPECT_DOUBLE_EQ(c.end_of(0, after), 3.5);
  EXPECT_DOUBLE_EQ(c.end_of(0, next), 4.0);
  // its own collective, from 1.5 alone (the later one would end at 3.0)
  EXPECT_DOUBLE_EQ(c.block_on(0, after), 2.5);
}

// A rank that blocks right after computing waits for the last of its peers to reach the
// collective (SimClock::sync_s): at most the kernel time since it last blocked (or that share of
// the compute it was measured after), so a chain of collectives with nothing computed between
// them pays it once.
TEST(SimStreams, ABlockAfterComputeWaitsForTheLastRankToArrive) {
  SimClock c;
  c.serial = c.beside_compute = true;
  c.sync_s = 0.5;
  double s = 0;
  const double a = c.issue(0, 0.0, 1.0, 2.0, 1.0, s);
  c.compute_s = c.busy_s = 1.0;
  // beside until 1.5 (0.75 done), then alone: 0.25 more
  EXPECT_DOUBLE_EQ(c.block_on(0, a), 1.75);
  c.compute_s = 1.75;
  const double b = c.issue(0, 1.75, 1.0, 2.0, 1.0, s);
  EXPECT_DOUBLE_EQ(c.block_on(0, b), 2.75) << "no compute since the last block: no wait";
  c.compute_s = 2.75;
  c.busy_s += 0.1;  // a short kernel: the ranks drift apart by at most its time
  const double d = c.issue(0, 2.75, 1.0, 2.0, 1.0, s);
  // the first 0.1 beside (0.05 done), then alone: 0.95 more
  EXPECT_DOUBLE_EQ(c.block_on(0, d), 2.85 + 0.95);

  // measured after 2 s of compute: after 1 s, half of it
  SimClock p;
  p.serial = p.beside_compute = true;
  p.sync_s = 0.5;
  p.sync_after_s = 2.0;
  const double e = p.issue(0, 0.0, 1.0, 2.0, 1.0, s);
  p.compute_s = p.busy_s = 1.0;
  EXPECT_DOUBLE_EQ(p.block_on(0, e), 1.625);  // beside until 1.25 (0.625 done), 0.375 alone
  p.compute_s = 1.625;
  p.busy_s = 4.0;  // more than the burst: the whole wait
  const double f = p.issue(0, 1.625, 1.0, 2.0, 1.0, s);
  EXPECT_DOUBLE_EQ(p.block_on(0, f), 2.125 + 0.75);
}

// The time a collective takes beside compute: its time alone plus the cluster's waits, the
// per-collective one and one per ring step; on a link slower than the cores (a shaped one), at
// least its link time, as the waits hide behind the link's.
TEST(SimStreams, ACollectiveBesideComputeAddsTheMeasuredWaitsPerRingStep) {
  Cluster cl = load_cluster("dgx-a100-80g");
  cl.beside_compute_base_s = 4e-3;
  cl.beside_compute_step_s = 1e-3;
  TrafficAccount account(4, 2, cl);
  const double t = account.add({CollKind::kAllReduce, GroupKind::kWorld, 1024, DType::kF32});
  EXPECT_NEAR(account.last_beside_compute_s(), t + 4e-3 + 6 * 1e-3, 1e-15);  // 2 (4 - 1) steps
  const double g = account.add({CollKind::kAllGather, GroupKind::kIntra, 1024, DType::kF32});
  EXPECT_NEAR(account.last_beside_compute_s(), g + 4e-3 + 1e-3, 1e-15);  // one step
  cl.host_cores = 2;
  cl.inter = LinkClass{25e6, 20e-6, false};  // 0.2 Gb/s per host
  cl.inter.stream_bytes_per_s = 600e6;
  TrafficAccount shaped(4, 2, cl);
  const double big = shaped.add({CollKind::kAllReduce, GroupKind::kInter, 1 << 22, DType::kF32});
  EXPECT_GT(big, 1.0);
  EXPECT_DOUBLE_EQ(shaped.last_beside_compute_s(), big) << "the link's wait hides the waits";
}

}  // namespace
}  // namespace sb
