// The Communicator's second comm stream (CommStream::kSide), driven by fake backends: an op on
// it starts only once the input it names is done, runs while kMain runs its next op (both
// backends are inside run() at once: a rendezvous that one stream cannot pass), the ledger is in
// issue order after synchronize() with each entry's stream, and without a side backend kSide is
// kMain. No MPI.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "harness/comm/communicator.h"

namespace sb {
namespace {

using namespace std::chrono_literals;

struct Rendezvous {
  std::atomic<bool> rs_done{false}, main_in_ag{false}, side_in_ar{false};
  std::atomic<bool> ag_saw_side{false}, ar_saw_main{false}, ar_started_after_rs{false};
  std::chrono::milliseconds patience = 5s;  // how long one side waits for the other
};

// Spins until flag is set or the patience runs out; returns whether it was set.
bool await(const std::atomic<bool>& flag, std::chrono::milliseconds patience) {
  const auto until = std::chrono::steady_clock::now() + patience;
  while (!flag.load()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// kMain: the reduce-scatter takes 30 ms; the all-gather waits inside run() for the side stream's
// all-reduce to be inside its run() too. kSide: the all-reduce does the same the other way.
class RendezvousBackend : public CommBackend {
 public:
  RendezvousBackend(std::shared_ptr<Rendezvous> r, bool side) : r_(std::move(r)), side_(side) {}
  std::string name() const override { return side_ ? "fake-side" : "fake"; }
  BackendResult run(const CollectiveOp& op) override {
    if (op.kind == CollKind::kReduceScatter) {
      std::this_thread::sleep_for(30ms);
      r_->rs_done.store(true);
    } else if (op.kind == CollKind::kAllGather) {
      r_->main_in_ag.store(true);
      r_->ag_saw_side.store(await(r_->side_in_ar, r_->patience));
    } else if (op.kind == CollKind::kAllReduce) {
      EXPECT_TRUE(side_) << "the all-reduce was issued on kSide";
      r_->ar_started_after_rs.store(r_->rs_done.load());
      r_->side_in_ar.store(true);
      r_->ar_saw_main.store(await(r_->main_in_ag, r_->patience));
    }
    return {};
  }

 private:
  std::shared_ptr<Rendezvous> r_;
  bool side_;
};

TEST(CommStreams, SideOpWaitsForItsInputThenRunsBesideTheMainStream) {
  const Topology t = Topology::virtual_nodes(4, 1, 2);
  auto r = std::make_shared<Rendezvous>();
  Ledger ledger;
  std::vector<float> full(8), shard(4);
  {
    Communicator comm(t, std::make_unique<RendezvousBackend>(r, false), ledger,
                      std::make_unique<RendezvousBackend>(r, true));
    EXPECT_TRUE(comm.has_side_stream());
    CommHandle rs = comm.reduce_scatter_async(full.data(), shard.data(), 4, DType::kF32,
                                              GroupKind::kIntra, "rs");
    CommHandle ar = comm.all_reduce_async(shard.data(), 4, DType::kF32, GroupKind::kInter, "ar",
                                          CommStream::kSide, rs);
    CommHandle ag = comm.all_gather_async(shard.data(), full.data(), 4, DType::kF32,
                                          GroupKind::kIntra, "ag");
    comm.synchronize();
    EXPECT_TRUE(rs.done() && ar.done() && ag.done());
  }
  EXPECT_TRUE(r->ar_started_after_rs.load());
  EXPECT_TRUE(r->ag_saw_side.load()) << "the all-gather ran while the all-reduce was not running";
  EXPECT_TRUE(r->ar_saw_main.load()) << "the all-reduce ran while the all-gather was not running";
  // issue order, whatever the completion order; each entry names its stream
  ASSERT_EQ(ledger.size(), 3u);
  const CollKind kinds[] = {CollKind::kReduceScatter, CollKind::kAllReduce, CollKind::kAllGather};
  const int streams[] = {0, 1, 0};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(ledger.entries()[i].seq, i);
    EXPECT_EQ(ledger.entries()[i].kind, kinds[i]);
    EXPECT_EQ(ledger.entries()[i].stream, streams[i]);
  }
}

// Without a side backend (the NCCL path) the all-reduce is an op of the main stream's, in issue
// order: it never meets an all-gather issued after it.
TEST(CommStreams, WithoutASideBackendSideOpsQueueOnTheMainStreamInIssueOrder) {
  const Topology t = Topology::virtual_nodes(4, 1, 2);
  auto r = std::make_shared<Rendezvous>();
  r->patience = 100ms;
  Ledger ledger;
  std::vector<float> full(8), shard(4);
  {
    // side = true: this one backend also runs the kSide all-reduce
    Communicator comm(t, std::make_unique<RendezvousBackend>(r, true), ledger);
    EXPECT_FALSE(comm.has_side_stream());
    CommHandle rs = comm.reduce_scatter_async(full.data(), shard.data(), 4, DType::kF32,
                                              GroupKind::kIntra, "rs");
    comm.all_reduce_async(shard.data(), 4, DType::kF32, GroupKind::kInter, "ar",
                          CommStream::kSide, rs);
    comm.all_gather_async(shard.data(), full.data(), 4, DType::kF32, GroupKind::kIntra, "ag");
    comm.synchronize();
  }
  EXPECT_TRUE(r->ar_started_after_rs.load());
  EXPECT_FALSE(r->ar_saw_main.load());
  EXPECT_TRUE(r->ag_saw_side.load());  // it had run before
  ASSERT_EQ(ledger.size(), 3u);
  EXPECT_EQ(ledger.entries()[1].kind, CollKind::kAllReduce);
  EXPECT_EQ(ledger.entries()[1].stream, 0);
}

}  // namespace
}  // namespace sb
