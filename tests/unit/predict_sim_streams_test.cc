// The simulated backend's second comm stream: one SimBackend per CommStream on one clock. An
// op on the side stream starts at max(issue, its stream free, its input done), so HYBRID_SHARD's
// all-reduce and the next all-gather start together after the reduce-scatter; with one stream
// the all-gather waits for the all-reduce. Exact logical times, no MPI.
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

}  // namespace
}  // namespace sb
