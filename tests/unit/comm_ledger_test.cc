// The ring model behind the ledger's intra/inter split, pinned to the closed forms of nccl-tests
// PERFORMANCE.md: per rank exactly for divisible sizes, summed over ranks for uneven ones, and
// the hop class of every rank for several world sizes and ranks-per-node shapes; and how the
// Communicator front end fills the ledger (FIFO order, count conventions, counted vs modelled,
// device vs wall-clock time), driven by fake backends. No MPI.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "harness/comm/collective.h"
#include "harness/comm/communicator.h"
#include "harness/comm/ledger.h"

namespace sb {
namespace {

constexpr GroupKind kKinds[] = {GroupKind::kWorld, GroupKind::kIntra, GroupKind::kInter};
constexpr DType kTypes[] = {DType::kF32, DType::kBF16};
struct Shape {
  int world, rpn;
};
constexpr Shape kShapes[] = {{1, 1}, {2, 1}, {2, 2}, {3, 1}, {3, 3}, {4, 1},
                             {4, 2}, {4, 4}, {6, 2}, {6, 3}, {8, 2}, {8, 4}};

TEST(RingChunk, SplitsCountIntoContiguousNearEqualChunks) {
  for (size_t count : {0, 1, 5, 7, 8, 1001, 1 << 20}) {
    for (int n : {1, 2, 3, 4, 7}) {
      size_t next = 0;
      for (int c = 0; c < n; ++c) {
        const Chunk ch = ring_chunk(count, n, c);
        EXPECT_EQ(ch.begin, next) << count << " " << n << " " << c;
        EXPECT_EQ(ch.len, count / n + (size_t(c) < count % n ? 1 : 0));
        next += ch.len;
      }
      EXPECT_EQ(next, count);
    }
  }
}

TEST(RingModel, CollNames) {
  EXPECT_STREQ(coll_name(CollKind::kAllReduce), "all_reduce");
  EXPECT_STREQ(coll_name(CollKind::kReduceScatter), "reduce_scatter");
  EXPECT_STREQ(coll_name(CollKind::kAllGather), "all_gather");
  EXPECT_STREQ(coll_name(CollKind::kBroadcast), "broadcast");
  EXPECT_STREQ(coll_name(CollKind::kReduce), "reduce");
  EXPECT_STREQ(coll_name(CollKind::kBarrier), "barrier");
}

// Closed form of the hop class, written without the model: a rank's ring hop leaves its node
// iff the group spans several nodes and the next rank (wrapping) sits on another node. For
// consecutive virtual nodes: world ring -> last local rank of each node; intra ring -> never;
// inter ring -> always.
bool hop_is_inter(const Topology& t, GroupKind g) {
  if (t.num_nodes() == 1) return false;
  switch (g) {
    case GroupKind::kWorld: return t.local_rank() == t.ranks_per_node() - 1;
    case GroupKind::kIntra: return false;
    case GroupKind::kInter: return true;
    default: return false;  // MiCS's groups are not in this ring model's shapes
  }
}

// Divisible sizes: every rank sends exactly (nccl-tests PERFORMANCE.md, ring)
// all-reduce 2(n-1)/n*S, reduce-scatter and all-gather (n-1)/n*S, broadcast S (0 for the last).
// The per-kind table (harness/comm/collective.h): the bus factors as nccl-tests PERFORMANCE.md
// writes them, and its group and busiest-position sums against the per-position bytes added up
// position by position, uneven counts and odd groups included.
TEST(CollectiveTable, BusFactorsAreNcclTests) {
  for (int n : {1, 2, 3, 8}) {
    EXPECT_DOUBLE_EQ(busbw_factor(CollKind::kAllReduce, n), 2.0 * (n - 1) / n);
    EXPECT_DOUBLE_EQ(busbw_factor(CollKind::kReduceScatter, n), double(n - 1) / n);
    EXPECT_DOUBLE_EQ(busbw_factor(CollKind::kAllGather, n), double(n - 1) / n);
    EXPECT_DOUBLE_EQ(busbw_factor(CollKind::kAllToAll, n), double(n - 1) / n);
    EXPECT_DOUBLE_EQ(busbw_factor(CollKind::kBroadcast, n), 1.0);
    EXPECT_DOUBLE_EQ(busbw_factor(CollKind::kReduce, n), 1.0);
    EXPECT_DOUBLE_EQ(busbw_factor(CollKind::kBarrier, n), 0.0);
  }
}

TEST(CollectiveTable, SumsMatchPositionByPosition) {
  for (int k = 0; k < kNumCollKinds; ++k)
    for (int n : {1, 2, 3, 4, 7})
      for (uint64_t count : {0, 1, 5, 6 * n, 1001}) {
        const CollKind kind = CollKind(k);
        if (kind == CollKind::kAllToAll && count % uint64_t(n) != 0) continue;  // communicator.cc
        for (int root = 0; root < n; ++root) {
          uint64_t sum = 0, most = 0;
          for (int i = 0; i < n; ++i) {
            const uint64_t b = position_sent_elements(kind, count, n, i, root);
            sum += b;
            most = std::max(most, b);
          }
          // the broadcast chain's idle position depends on the root; the sums do not
          EXPECT_EQ(sum, group_sent_elements(kind, count, n)) << coll_name(kind) << " n=" << n;
          EXPECT_LE(most, max_position_sent_elements(kind, count, n)) << coll_name(kind);
          if (count % uint64_t(n) == 0) {
            EXPECT_EQ(most, max_position_sent_elements(kind, count, n)) << coll_name(kind);
          }
        }
      }
}

TEST(RingModel, DivisibleSizesMatchClosedFormsPerRank) {
  for (const Shape sh : kShapes) {
    for (int r = 0; r < sh.world; ++r) {
      const Topology t = Topology::virtual_nodes(sh.world, r, sh.rpn);
      for (GroupKind g : kKinds) {
        const Group& grp = t.group(g);
        const uint64_t n = uint64_t(grp.size());
        for (DType d : kTypes) {
          for (size_t per : {1, 3, 1000}) {
            const size_t count = per * n * 2;  // divisible by n (and by 2n)
            const uint64_t S = count * dtype_bytes(d);
            SCOPED_TRACE(testing::Message()
                         << "world " << sh.world << " rpn " << sh.rpn << " rank " << r << " "
                         << group_name(g) << " " << dtype_name(d) << " count " << count);
            const uint64_t ar = 2 * (n - 1) * S / n, rs = (n - 1) * S / n;
            const bool inter = hop_is_inter(t, g);
            auto expect = [&](CollKind k, uint64_t want, int root = 0) {
              const HopBytes h = ring_model_sent(k, count, d, grp, t, root);
              EXPECT_EQ(h.total(), want) << coll_name(k);
              EXPECT_EQ(h.inter, inter ? want : 0) << coll_name(k);
              EXPECT_EQ(h.intra, inter ? 0 : want) << coll_name(k);
            };
            expect(CollKind::kAllReduce, ar);
            expect(CollKind::kReduceScatter, rs);
            expect(CollKind::kAllGather, rs);
            expect(CollKind::kBarrier, 0);
            for (int root = 0; root < int(n); ++root) {
              expect(CollKind::kBroadcast,
                     (grp.index - root + int(n)) % int(n) == int(n) - 1 ? 0 : S, root);
              expect(CollKind::kReduce, grp.index == root ? 0 : S, root);  // chain to the root
            }
          }
        }
      }
    }
  }
}

// Uneven sizes: per-rank bytes differ by a chunk, but summed over the group's ranks the ring
// all-reduce moves exactly 2(n-1)*S and the broadcast chain (n-1)*S.
TEST(RingModel, UnevenSizesMatchClosedFormsSummedOverRanks) {
  for (const Shape sh : kShapes) {
    for (GroupKind g : kKinds) {
      for (DType d : kTypes) {
        for (size_t count : {1, 7, 1001, 262147}) {
          const uint64_t b = dtype_bytes(d), S = count * b;
          uint64_t ar_sum = 0, bc_sum = 0, ar_inter = 0;
          const Topology t0 = Topology::virtual_nodes(sh.world, 0, sh.rpn);
          const Group& mine = t0.group(g);
          const uint64_t n = uint64_t(mine.size());
          for (int r : mine.ranks) {  // the group of rank 0, seen from each of its members
            const Topology t = Topology::virtual_nodes(sh.world, r, sh.rpn);
            const HopBytes ar = ring_model_sent(CollKind::kAllReduce, count, d, t.group(g), t);
            ar_sum += ar.total();
            ar_inter += ar.inter;
            bc_sum +=
                ring_model_sent(CollKind::kBroadcast, count, d, t.group(g), t, 1 % int(n)).total();
            // per rank: n-1 chunks of each phase, each chunk floor or ceil of count/n
            EXPECT_GE(ar.total(), 2 * (n - 1) * (count / n) * b);
            EXPECT_LE(ar.total(), 2 * (n - 1) * ((count + n - 1) / n) * b);
            if (!hop_is_inter(t, g)) {
              EXPECT_EQ(ar.inter, 0u);
            }
          }
          SCOPED_TRACE(testing::Message() << "world " << sh.world << " rpn " << sh.rpn << " "
                                          << group_name(g) << " count " << count);
          EXPECT_EQ(ar_sum, 2 * (n - 1) * S);
          EXPECT_EQ(bc_sum, (n - 1) * S);
          if (g == GroupKind::kIntra || n == 1) {
            EXPECT_EQ(ar_inter, 0u);
          }
          if (g == GroupKind::kInter) {
            EXPECT_EQ(ar_inter, ar_sum);
          }
        }
      }
    }
  }
}

// World ring over M nodes of G ranks: M of the N hops leave a node, so with divisible sizes the
// inter-node bytes of an all-reduce over all ranks are M * 2(N-1)/N * S (the hop rule written
// out in tests/closed_forms.h).
TEST(RingModel, WorldRingInterBytesSummedOverRanks) {
  for (const Shape sh : kShapes) {
    const uint64_t N = sh.world, M = N / sh.rpn, count = 12 * N, S = count * 4;
    uint64_t inter = 0, intra = 0;
    for (int r = 0; r < sh.world; ++r) {
      const Topology t = Topology::virtual_nodes(sh.world, r, sh.rpn);
      const HopBytes h = ring_model_sent(CollKind::kAllReduce, count, DType::kF32, t.world(), t);
      inter += h.inter;
      intra += h.intra;
    }
    const uint64_t per_rank = 2 * (N - 1) * S / N;
    EXPECT_EQ(inter, M > 1 ? M * per_rank : 0) << sh.world << "/" << sh.rpn;
    EXPECT_EQ(intra + inter, N * per_rank);
  }
}

TEST(RingModel, InterleavedNodesMakeEveryWorldHopInter) {
  for (int r = 0; r < 4; ++r) {
    const Topology t(4, r, {0, 1, 0, 1});
    const HopBytes h = ring_model_sent(CollKind::kAllGather, 400, DType::kBF16, t.world(), t);
    EXPECT_EQ(h.inter, 3u * 100 * 2);
    EXPECT_EQ(h.intra, 0u);
    // intra ring {0,2} or {1,3}: both hops stay on the node
    const HopBytes hi = ring_model_sent(CollKind::kAllReduce, 10, DType::kF32, t.intra(), t);
    EXPECT_EQ(hi.intra, 2u * 1 * 10 * 4 / 2);
    EXPECT_EQ(hi.inter, 0u);
  }
}

TEST(RingModel, GroupOfOneSendsNothing) {
  const Topology t = Topology::virtual_nodes(4, 2, 2), one,
                 alone = Topology::virtual_nodes(4, 2, 1);
  for (CollKind k : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather,
                     CollKind::kBroadcast, CollKind::kBarrier, CollKind::kReduce}) {
    EXPECT_EQ(ring_model_sent(k, 1000, DType::kF32, one.world(), one).total(), 0u);
    EXPECT_EQ(ring_model_sent(k, 1000, DType::kF32, alone.intra(), alone).total(), 0u);
  }
  EXPECT_EQ(ring_model_sent(CollKind::kBarrier, 1000, DType::kF32, t.world(), t).total(), 0u);
}

TEST(Ledger, SumsEntriesFromAnIndex) {
  Ledger l;
  EXPECT_EQ(l.size(), 0u);
  EXPECT_EQ(l.payload_bytes(), 0u);
  for (int k = 0; k < 3; ++k) {
    LedgerEntry e;
    e.kind = CollKind::kAllReduce;
    e.count = 10 * (k + 1);
    e.payload_bytes = e.count * 4;
    e.sent.intra = 100 * (k + 1);
    e.sent.inter = 7 * k;
    l.record(e);
  }
  EXPECT_EQ(l.size(), 3u);
  EXPECT_EQ(l.payload_bytes(), 240u);
  EXPECT_EQ(l.payload_bytes(1), 200u);
  EXPECT_EQ(l.sent().intra, 600u);
  EXPECT_EQ(l.sent().inter, 21u);
  EXPECT_EQ(l.sent(2).total(), 300u + 14u);
  EXPECT_EQ(l.sent(3).total(), 0u);
  l.clear();
  EXPECT_EQ(l.size(), 0u);
}

// A backend that moves nothing: it logs the ops it runs (read after synchronize), can be held
// at a gate, and claims to have counted all-reduces only (with made-up bytes).
class FakeBackend : public CommBackend {
 public:
  std::string name() const override { return "fake"; }
  BackendResult run(const CollectiveOp& op) override {
    while (!open->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    log->push_back(op.kind);
    BackendResult res;
    res.sent = HopBytes{11, 22};
    res.counted = op.kind == CollKind::kAllReduce;
    return res;
  }
  std::shared_ptr<std::atomic<bool>> open = std::make_shared<std::atomic<bool>>(true);
  std::shared_ptr<std::vector<CollKind>> log = std::make_shared<std::vector<CollKind>>();
};

TEST(LedgerFromCommunicator, RecordsOpsInIssueOrderWithCountConventions) {
  const Topology t = Topology::virtual_nodes(4, 1, 2);  // world of 4, I am rank 1, 2 per node
  auto backend = std::make_unique<FakeBackend>();
  auto log = backend->log;
  Ledger ledger;
  std::vector<float> a(100), b(400);
  {
    Communicator comm(t, std::move(backend), ledger);
    EXPECT_EQ(comm.backend_name(), "fake");
    comm.all_reduce_async(a.data(), 100, DType::kF32, GroupKind::kWorld, "ar");
    comm.reduce_scatter_async(b.data(), a.data(), 50, DType::kBF16, GroupKind::kIntra, "rs");
    comm.all_gather_async(a.data(), b.data(), 25, DType::kF32, GroupKind::kWorld, "ag");
    comm.broadcast_async(a.data(), 10, DType::kF32, 1, GroupKind::kInter, "bc");
    comm.barrier_async(GroupKind::kWorld);
    // no synchronize: the destructor drains the queue
  }
  ASSERT_EQ(ledger.size(), 5u);
  EXPECT_EQ(*log, (std::vector<CollKind>{CollKind::kAllReduce, CollKind::kReduceScatter,
                                         CollKind::kAllGather, CollKind::kBroadcast,
                                         CollKind::kBarrier}));
  const auto& e = ledger.entries();
  const char* tags[] = {"ar", "rs", "ag", "bc", ""};
  for (size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(e[k].kind, (*log)[k]);
    EXPECT_EQ(e[k].tag, tags[k]);
    EXPECT_GT(e[k].time_s, 0.0) << "measured around the call";  // a wall-clock interval
    EXPECT_LT(e[k].time_s, 60.0);
  }
  // all-reduce: buffer elements; counted, so the backend's bytes are kept
  EXPECT_EQ(e[0].count, 100u);
  EXPECT_EQ(e[0].payload_bytes, 400u);
  EXPECT_EQ(e[0].group_size, 4);
  EXPECT_TRUE(e[0].counted);
  EXPECT_EQ(e[0].sent.intra, 11u);
  EXPECT_EQ(e[0].sent.inter, 22u);
  // reduce-scatter: input elements = recv_count * n; not counted, so the ring model
  EXPECT_EQ(e[1].group, GroupKind::kIntra);
  EXPECT_EQ(e[1].count, 100u);
  EXPECT_EQ(e[1].payload_bytes, 200u);
  EXPECT_FALSE(e[1].counted);
  EXPECT_EQ(e[1].sent.intra, 100u);  // (n-1)/n * 200 B, n = 2, next rank 0 on my node
  EXPECT_EQ(e[1].sent.inter, 0u);
  // all-gather: output elements = send_count * n; rank 1 -> 2 crosses nodes
  EXPECT_EQ(e[2].count, 100u);
  EXPECT_EQ(e[2].sent.inter, 300u);
  EXPECT_EQ(e[2].sent.intra, 0u);
  // broadcast over inter {1, 3} from index 1 (rank 3): I am last in the chain, send nothing
  EXPECT_EQ(e[3].count, 10u);
  EXPECT_EQ(e[3].group_size, 2);
  EXPECT_EQ(e[3].sent.total(), 0u);
  EXPECT_EQ(e[4].count, 0u);
  EXPECT_EQ(e[4].sent.total(), 0u);
  EXPECT_EQ(ledger.payload_bytes(), 400u + 200u + 400u + 40u);
}

// A backend that takes sleep_ms of wall time in run() and reports device_seconds (as the NCCL
// backend does with events on its stream; < 0: it did not time the collective itself).
class TimedBackend : public CommBackend {
 public:
  TimedBackend(int sleep_ms, double device_seconds)
      : sleep_ms_(sleep_ms), device_seconds_(device_seconds) {}
  std::string name() const override { return "timed"; }
  BackendResult run(const CollectiveOp&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    BackendResult res;
    res.device_seconds = device_seconds_;
    return res;
  }

 private:
  int sleep_ms_;
  double device_seconds_;
};

double ledger_time_of_one_all_reduce(std::unique_ptr<CommBackend> backend) {
  const Topology t;
  Ledger ledger;
  float x = 1;
  {
    Communicator comm(t, std::move(backend), ledger);
    comm.all_reduce(&x, 1, DType::kF32, GroupKind::kWorld);
  }
  EXPECT_EQ(ledger.size(), 1u);
  return ledger.size() == 1 ? ledger.entries()[0].time_s : -1;
}

// The NCCL case: the wall time around run() includes the comm stream's wait for compute, so a
// backend's own device time is what the ledger records.
TEST(LedgerFromCommunicator, TimeIsTheBackendsDeviceTimeWhenReported) {
  EXPECT_EQ(ledger_time_of_one_all_reduce(std::make_unique<TimedBackend>(50, 0.002)), 0.002);
  EXPECT_EQ(ledger_time_of_one_all_reduce(std::make_unique<TimedBackend>(0, 0.0)), 0.0);
}

// The MPI case: no device time, so the wall clock around run() (no upper bound: busy machines).
TEST(LedgerFromCommunicator, TimeIsTheWallClockWhenTheBackendDoesNotTime) {
  EXPECT_GE(ledger_time_of_one_all_reduce(std::make_unique<TimedBackend>(20, -1)), 0.02);
}

// The NCCL case again: a device backend marks each op's inputs when it is issued, on the
// issuing thread (the compute queued by then), and run() on the comm thread receives that mark.
class MarkingBackend : public CommBackend {
 public:
  std::string name() const override { return "marking"; }
  uint64_t on_issue() override {
    issue_threads.push_back(std::this_thread::get_id());  // only the issuing thread appends
    return 100 + issue_threads.size();
  }
  BackendResult run(const CollectiveOp& op) override {
    run_marks.push_back(op.issue_mark);  // only the comm thread appends
    run_threads.push_back(std::this_thread::get_id());
    return {};
  }
  std::vector<std::thread::id> issue_threads, run_threads;
  std::vector<uint64_t> run_marks;
};

TEST(LedgerFromCommunicator, BackendMarksEachOpOnTheIssuingThreadAndRunSeesTheMark) {
  const Topology t;
  Ledger ledger;
  auto owned = std::make_unique<MarkingBackend>();
  MarkingBackend& backend = *owned;
  float x[3] = {1, 2, 3};
  {
    Communicator comm(t, std::move(owned), ledger);
    CommHandle a = comm.all_reduce_async(x, 1, DType::kF32, GroupKind::kWorld);
    CommHandle b = comm.broadcast_async(x + 1, 1, DType::kF32, 0, GroupKind::kWorld);
    comm.barrier(GroupKind::kWorld);
    a.wait();
    b.wait();
    comm.synchronize();
    EXPECT_EQ(backend.run_marks, (std::vector<uint64_t>{101, 102, 103}));
    ASSERT_EQ(backend.issue_threads.size(), 3u);
    for (auto id : backend.issue_threads) EXPECT_EQ(id, std::this_thread::get_id());
    for (auto id : backend.run_threads) EXPECT_NE(id, std::this_thread::get_id());
  }
}

// --overlap off (Strategy::maybe_wait) and the synchronous calls: the caller did nothing since
// the issue, so all of it is exposed, even where the op finished before the caller got to its
// wait (a caller descheduled on oversubscribed cores): wait() would count nothing there.
TEST(LedgerFromCommunicator, WaitFromIssueCountsTheTimeSinceTheIssue) {
  const Topology t;
  Ledger ledger;
  Communicator comm(t, std::make_unique<FakeBackend>(), ledger);
  float x = 1;
  CommHandle h = comm.all_reduce_async(&x, 1, DType::kF32, GroupKind::kWorld);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  ASSERT_TRUE(h.done());
  CommHandle copy = h;
  copy.wait();
  EXPECT_EQ(comm.blocked_seconds(), 0.0) << "wait() on a done op counts nothing";
  h.wait_from_issue();
  EXPECT_GE(comm.blocked_seconds(), 0.04);
  EXPECT_LT(comm.blocked_seconds(), 10.0);
  comm.reset_blocked_seconds();
  comm.all_reduce(&x, 1, DType::kF32, GroupKind::kWorld);  // synchronous: exposed as well
  EXPECT_GT(comm.blocked_seconds(), 0.0);
}

TEST(LedgerFromCommunicator, WaitBlocksUntilDoneAndCountsBlockedTime) {
  const Topology t;
  auto backend = std::make_unique<FakeBackend>();
  auto open = backend->open;
  open->store(false);
  Ledger ledger;
  Communicator comm(t, std::move(backend), ledger);
  float x = 1;
  CommHandle h1 = comm.all_reduce_async(&x, 1, DType::kF32, GroupKind::kWorld);
  CommHandle h2 = comm.all_reduce_async(&x, 1, DType::kF32, GroupKind::kWorld);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(h1.done());
  EXPECT_FALSE(h2.done());
  EXPECT_EQ(comm.blocked_seconds(), 0.0);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    open->store(true);
  });
  h2.wait();
  opener.join();
  EXPECT_TRUE(h1.done());  // FIFO: the earlier op finished first
  EXPECT_TRUE(h2.done());
  EXPECT_GE(comm.blocked_seconds(), 0.03);
  comm.reset_blocked_seconds();
  h1.wait();  // already done: no blocked time
  comm.synchronize();
  EXPECT_LT(comm.blocked_seconds(), 0.03);
  EXPECT_EQ(ledger.size(), 2u);
}

}  // namespace
}  // namespace sb
