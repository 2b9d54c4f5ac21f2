// Multi-rank tests of the Communicator over both MPI backends (ring, native): values of every
// collective on every group kind in fp32 and bf16 at odd and large sizes, FIFO async execution
// overlapping compute, the split of large counts, and the ledger's bytes against the ring closed
// forms (nccl-tests PERFORMANCE.md): per rank for divisible sizes, summed over ranks otherwise.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/comm/mpi_runtime.h"
#include "tests/mpi/mpi_env.h"

namespace sb {
namespace {

using testing::g_runtime;

constexpr GroupKind kKinds[] = {GroupKind::kWorld, GroupKind::kIntra, GroupKind::kInter};
constexpr DType kTypes[] = {DType::kF32, DType::kBF16};
constexpr size_t kBig = 262147;  // odd, divisible by none of 2..4; fp32: just over 1 MiB
constexpr size_t kSizes[] = {1, 7, 1001, 1008, kBig};  // 1008: divisible by 1..4

// A host buffer of one dtype with float access (bf16 rounded to nearest even on store).
struct Buf {
  Buf(DType t, size_t n) : type(t), bytes(n * dtype_bytes(t)) {}
  DType type;
  std::vector<unsigned char> bytes;
  void* data() { return bytes.data(); }
  void* at(size_t i) { return bytes.data() + i * dtype_bytes(type); }
  float get(size_t i) const {
    if (type == DType::kBF16)
      return bf16_to_f32(reinterpret_cast<const uint16_t*>(bytes.data())[i]);
    return reinterpret_cast<const float*>(bytes.data())[i];
  }
  void set(size_t i, float v) {
    if (type == DType::kBF16)
      reinterpret_cast<uint16_t*>(bytes.data())[i] = f32_to_bf16(v);
    else
      reinterpret_cast<float*>(bytes.data())[i] = v;
  }
};

// Small integers: every partial sum over <= 4 ranks is exact in bf16 and fp32, so the result
// is independent of the reduction order and both backends must agree bit for bit.
float value(int world_rank, size_t e) { return float(1 + (world_rank * 5 + e * 3) % 7); }
float group_sum(const Group& grp, size_t e) {
  float sum = 0;
  for (int r : grp.ranks) sum += value(r, e);
  return sum;
}

const char* impl_name(CollectiveImpl i) { return i == CollectiveImpl::kRing ? "ring" : "native"; }

class Collectives : public ::testing::TestWithParam<CollectiveImpl> {
 protected:
  void SetUp() override { comm_ = make_comm(size_t(INT32_MAX)); }
  void TearDown() override { comm_.reset(); }
  std::unique_ptr<Communicator> make_comm(size_t max_elems) {
    return std::make_unique<Communicator>(topo_, make_mpi_backend(topo_, GetParam(), max_elems),
                                          ledger_);
  }
  bool ring() const { return GetParam() == CollectiveImpl::kRing; }

  // The last ledger entry describes the op; its bytes equal the ring model (measured by the
  // ring backend, modelled for native) and the closed forms: per rank when the ring chunks are
  // even, and summed over all ranks (all groups of this kind at once) always.
  void check_last_entry(CollKind k, GroupKind g, size_t count, DType d, int root = 0) {
    comm_->synchronize();
    ASSERT_GT(ledger_.size(), 0u);
    const LedgerEntry& e = ledger_.entries().back();
    const Group& grp = topo_.group(g);
    const uint64_t n = uint64_t(grp.size()), S = count * dtype_bytes(d);
    EXPECT_EQ(e.kind, k);
    EXPECT_EQ(e.group, g);
    EXPECT_EQ(e.group_size, int(n));
    EXPECT_EQ(e.count, count);
    EXPECT_EQ(e.dtype, d);
    EXPECT_EQ(e.payload_bytes, S);
    EXPECT_GT(e.time_s, 0.0) << "measured around the call";  // a wall-clock interval
    EXPECT_LT(e.time_s, 60.0);
    EXPECT_EQ(e.counted, ring() && k != CollKind::kBarrier);
    const HopBytes model = ring_model_sent(k, count, d, grp, topo_, root);
    EXPECT_EQ(e.sent.intra, model.intra);
    EXPECT_EQ(e.sent.inter, model.inter);
    // Hop rule (tests/closed_forms.h): all my sends go to the next rank of the ring, inter iff off-node.
    const int next = grp.ranks[(grp.index + 1) % int(n)];
    if (topo_.same_node(topo_.rank(), next)) {
      EXPECT_EQ(e.sent.inter, 0u);
    } else {
      EXPECT_EQ(e.sent.intra, 0u);
    }
    // nccl-tests PERFORMANCE.md, ring: all-reduce 2(n-1)/n*S, RS/AG (n-1)/n*S per rank; summed
    // over a group: 2(n-1)*S and (n-1)*S exactly, even chunks or not; broadcast and reduce
    // chains (n-1)*S.
    const uint64_t factor = k == CollKind::kAllReduce ? 2 : (k == CollKind::kBarrier ? 0 : 1);
    const uint64_t groups = uint64_t(topo_.world_size()) / n;
    EXPECT_EQ(g_runtime->sum_over_ranks_u64(e.sent.total()), groups * factor * (n - 1) * S);
    if (count % n == 0 && k != CollKind::kBroadcast && k != CollKind::kReduce) {
      EXPECT_EQ(e.sent.total(), factor * (n - 1) * S / n);
    }
    if (k == CollKind::kBroadcast) {
      const bool last = (grp.index - root + int(n)) % int(n) == int(n) - 1;
      EXPECT_EQ(e.sent.total(), n == 1 || last ? 0 : S);
    }
    if (k == CollKind::kReduce) {  // the chain ends at the root: every other rank sends S
      EXPECT_EQ(e.sent.total(), grp.index == root ? 0 : S);
    }
  }

  Topology topo_ = testing::test_topology();
  Ledger ledger_;
  std::unique_ptr<Communicator> comm_;
};

TEST_P(Collectives, AllReduceSumsOverTheGroup) {
  for (GroupKind g : kKinds) {
    const Group& grp = topo_.group(g);
    for (DType d : kTypes) {
      for (size_t count : kSizes) {
        SCOPED_TRACE(::testing::Message() << group_name(g) << " " << dtype_name(d) << " " << count);
        Buf buf(d, count);
        for (size_t i = 0; i < count; ++i) buf.set(i, value(topo_.rank(), i));
        comm_->all_reduce(buf.data(), count, d, g, "ar");
        size_t bad = 0;
        for (size_t i = 0; i < count; ++i) {
          float want = 0;
          for (int r : grp.ranks) want += value(r, i);
          bad += buf.get(i) != want;
        }
        EXPECT_EQ(bad, 0u);
        check_last_entry(CollKind::kAllReduce, g, count, d);
      }
    }
  }
}

TEST_P(Collectives, ReduceScatterLeavesEachRankItsSummedBlock) {
  for (GroupKind g : kKinds) {
    const Group& grp = topo_.group(g);
    const size_t n = size_t(grp.size()), me = size_t(grp.index);
    for (DType d : kTypes) {
      for (size_t m : kSizes) {
        for (bool aliased : {false, true}) {  // aliased: recv is block `me` of send (a shard)
          SCOPED_TRACE(::testing::Message() << group_name(g) << " " << dtype_name(d) << " " << m
                                            << (aliased ? " aliased" : ""));
          Buf send(d, n * m), out(d, m);
          for (size_t i = 0; i < n * m; ++i) send.set(i, value(topo_.rank(), i));
          void* recv = aliased ? send.at(me * m) : out.data();
          comm_->reduce_scatter(send.data(), recv, m, d, g, "rs");
          const Buf& res = aliased ? send : out;
          const size_t off = aliased ? me * m : 0;
          size_t bad = 0;
          for (size_t k = 0; k < m; ++k) {
            float want = 0;
            for (int r : grp.ranks) want += value(r, me * m + k);
            bad += res.get(off + k) != want;
          }
          EXPECT_EQ(bad, 0u);
          check_last_entry(CollKind::kReduceScatter, g, n * m, d);
        }
      }
    }
  }
}

TEST_P(Collectives, AllGatherConcatenatesBlocksInGroupOrder) {
  for (GroupKind g : kKinds) {
    const Group& grp = topo_.group(g);
    const size_t n = size_t(grp.size()), me = size_t(grp.index);
    for (DType d : kTypes) {
      for (size_t m : kSizes) {
        for (bool in_place : {false, true}) {  // in place: send is block `me` of recv
          SCOPED_TRACE(::testing::Message() << group_name(g) << " " << dtype_name(d) << " " << m
                                            << (in_place ? " in place" : ""));
          Buf send(d, m), recv(d, n * m);
          Buf& src = in_place ? recv : send;
          const size_t off = in_place ? me * m : 0;
          for (size_t k = 0; k < m; ++k) src.set(off + k, value(topo_.rank(), k));
          comm_->all_gather(src.at(off), recv.data(), m, d, g, "ag");
          size_t bad = 0;
          for (size_t b = 0; b < n; ++b)
            for (size_t k = 0; k < m; ++k) bad += recv.get(b * m + k) != value(grp.ranks[b], k);
          EXPECT_EQ(bad, 0u);
          check_last_entry(CollKind::kAllGather, g, n * m, d);
        }
      }
    }
  }
}

TEST_P(Collectives, BroadcastCopiesTheRootToEveryRank) {
  for (GroupKind g : kKinds) {
    const Group& grp = topo_.group(g);
    for (DType d : kTypes) {
      for (size_t count : kSizes) {
        for (int root = 0; root < grp.size(); ++root) {
          SCOPED_TRACE(::testing::Message() << group_name(g) << " " << dtype_name(d) << " " << count
                                            << " root " << root);
          Buf buf(d, count);
          for (size_t i = 0; i < count; ++i) buf.set(i, value(topo_.rank(), i));
          comm_->broadcast(buf.data(), count, d, root, g);
          size_t bad = 0;
          for (size_t i = 0; i < count; ++i) bad += buf.get(i) != value(grp.ranks[root], i);
          EXPECT_EQ(bad, 0u);
          check_last_entry(CollKind::kBroadcast, g, count, d, root);
        }
      }
    }
  }
}

// Every root, odd sizes (chains of uneven pieces: kBig spans several 512 KiB pieces): the
// root holds the group's sum, every other rank's buffer is unchanged.
TEST_P(Collectives, ReduceSumsToTheRootOnly) {
  for (GroupKind g : kKinds) {
    const Group& grp = topo_.group(g);
    for (DType d : kTypes) {
      for (size_t count : kSizes) {
        for (int root = grp.size() - 1; root >= 0; --root) {
          SCOPED_TRACE(::testing::Message() << group_name(g) << " " << dtype_name(d) << " " << count
                                            << " root " << root);
          Buf buf(d, count);
          for (size_t i = 0; i < count; ++i) buf.set(i, value(topo_.rank(), i));
          comm_->reduce_async(buf.data(), count, d, root, g, "reduce").wait();
          size_t bad = 0;
          for (size_t i = 0; i < count; ++i) {
            float want = value(topo_.rank(), i);
            if (grp.index == root) {
              want = 0;
              for (int r : grp.ranks) want += value(r, i);
            }
            bad += buf.get(i) != want;
          }
          EXPECT_EQ(bad, 0u);
          check_last_entry(CollKind::kReduce, g, count, d, root);
        }
      }
    }
  }
}

TEST_P(Collectives, BarrierRecordsNoBytes) {
  for (GroupKind g : kKinds) {
    comm_->barrier(g);
    check_last_entry(CollKind::kBarrier, g, 0, DType::kF32);
  }
}

// Non-integer values: the ring reduces chunk c starting at position c+1 and adds one position per
// hop, rounding after each add (bf16: fp32 add, one rounding); replaying that order must give
// the ring's result bit for bit. MPI's own order is unspecified: native is held to a tolerance.
TEST_P(Collectives, ReductionOrderAndRoundingPerHop) {
  for (GroupKind g : kKinds) {
    const Group& grp = topo_.group(g);
    const int n = grp.size();
    for (DType d : kTypes) {
      const size_t count = 1001;
      // Tabulated once: recomputing sin() at each use may round differently (FMA contraction).
      std::vector<Buf> xs(size_t(n), Buf(d, count));
      for (int pos = 0; pos < n; ++pos)
        for (size_t i = 0; i < count; ++i)
          xs[pos].set(i, std::sin(0.37 * double(i) + 1.3 * grp.ranks[pos]) * 3.0);
      auto x = [&](int pos, size_t i) { return xs[size_t(pos)].get(i); };
      Buf buf(d, count);
      for (size_t i = 0; i < count; ++i) buf.set(i, x(grp.index, i));
      comm_->all_reduce(buf.data(), count, d, g);
      size_t bad = 0;
      for (int c = 0; c < n; ++c) {
        const Chunk ch = ring_chunk(count, n, c);
        for (size_t i = ch.begin; i < ch.begin + ch.len; ++i) {
          Buf acc(d, 1);
          acc.set(0, x((c + 1) % n, i));
          double exact = x((c + 1) % n, i);
          for (int j = 2; j <= n; ++j) {
            acc.set(0, acc.get(0) + x((c + j) % n, i));
            exact += x((c + j) % n, i);
          }
          const double tol = (d == DType::kBF16 ? 1.0 / 64 : 1e-5) * (1.0 + std::fabs(exact)) * n;
          bad += ring() ? buf.get(i) != acc.get(0) : std::fabs(buf.get(i) - exact) > tol;
        }
      }
      EXPECT_EQ(bad, 0u) << group_name(g) << " " << dtype_name(d);
    }
  }
  comm_->synchronize();
}

// Several collectives in flight at once on different groups while the caller computes: they
// complete without any wait() (the comm thread progresses them), in issue order in the ledger,
// with correct values; waiting on a finished handle adds no blocked time.
TEST_P(Collectives, AsyncOpsOverlapComputeAndRunInIssueOrder) {
  const Group& world = topo_.world();
  const Group& intra = topo_.intra();
  const Group& inter = topo_.inter();
  const size_t count = 20000, m = 3001;
  Buf ar(DType::kF32, count), ar16(DType::kBF16, count), bc(DType::kBF16, count);
  Buf ag_send(DType::kF32, m), ag(DType::kF32, m * intra.size());
  Buf rs_send(DType::kBF16, m * inter.size()), rs(DType::kBF16, m);
  for (size_t i = 0; i < count; ++i) {
    ar.set(i, value(topo_.rank(), i));
    ar16.set(i, value(topo_.rank(), i + 1));
    bc.set(i, value(topo_.rank(), i + 2));
  }
  for (size_t k = 0; k < m; ++k) ag_send.set(k, value(topo_.rank(), k));
  for (size_t k = 0; k < m * inter.size(); ++k) rs_send.set(k, value(topo_.rank(), k));

  const size_t first = ledger_.size();
  comm_->reset_blocked_seconds();
  std::vector<CommHandle> hs;
  hs.push_back(comm_->all_reduce_async(ar.data(), count, DType::kF32, GroupKind::kWorld, "t0"));
  hs.push_back(
      comm_->all_gather_async(ag_send.data(), ag.data(), m, DType::kF32, GroupKind::kIntra, "t1"));
  hs.push_back(comm_->reduce_scatter_async(rs_send.data(), rs.data(), m, DType::kBF16,
                                           GroupKind::kInter, "t2"));
  hs.push_back(comm_->broadcast_async(bc.data(), count, DType::kBF16, world.size() - 1,
                                      GroupKind::kWorld, "t3"));
  hs.push_back(comm_->all_reduce_async(ar16.data(), count, DType::kBF16, GroupKind::kIntra, "t4"));
  for (const CommHandle& h : hs) EXPECT_TRUE(h.valid());

  // Compute until everything is done, without waiting on the communicator.
  volatile double sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto all_done = [&] {
    for (const CommHandle& h : hs)
      if (!h.done()) return false;
    return true;
  };
  while (!all_done() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    double s = 0;
    for (int i = 1; i < 20000; ++i) s += std::sqrt(double(i));
    sink = sink + s;
  }
  EXPECT_TRUE(all_done()) << "collectives did not progress while the caller computed";
  // Waiting in reverse order is fine; every handle is already done, so nothing is blocked.
  for (auto it = hs.rbegin(); it != hs.rend(); ++it) it->wait();
  EXPECT_EQ(comm_->blocked_seconds(), 0.0);
  comm_->synchronize();

  ASSERT_EQ(ledger_.size(), first + hs.size());
  for (size_t k = 0; k < hs.size(); ++k)
    EXPECT_EQ(ledger_.entries()[first + k].tag, std::string(1, 't') += char('0' + k));
  EXPECT_EQ(ledger_.entries()[first + 1].group, GroupKind::kIntra);
  EXPECT_EQ(ledger_.entries()[first + 2].kind, CollKind::kReduceScatter);

  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    float want = 0, want16 = 0;
    for (int r : world.ranks) want += value(r, i);
    for (int r : intra.ranks) want16 += value(r, i + 1);
    bad += ar.get(i) != want;
    bad += ar16.get(i) != want16;
    bad += bc.get(i) != value(world.ranks.back(), i + 2);
  }
  for (size_t b = 0; b < size_t(intra.size()); ++b)
    for (size_t k = 0; k < m; ++k) bad += ag.get(b * m + k) != value(intra.ranks[b], k);
  for (size_t k = 0; k < m; ++k) {
    float want = 0;
    for (int r : inter.ranks) want += value(r, size_t(inter.index) * m + k);
    bad += rs.get(k) != want;
  }
  EXPECT_EQ(bad, 0u);
  (void)sink;
}

TEST_P(Collectives, WaitAccountsBlockedTime) {
  comm_->reset_blocked_seconds();
  EXPECT_EQ(comm_->blocked_seconds(), 0.0);
  Buf buf(DType::kF32, 4096);
  // The last rank enters 100 ms late: every other rank's wait must count that time as blocked
  // (it cannot finish before the last rank joins); the late rank itself barely waits.
  const bool late = topo_.rank() == topo_.world_size() - 1;
  if (late) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CommHandle h = comm_->all_reduce_async(buf.data(), 4096, DType::kF32, GroupKind::kWorld);
  h.wait();
  EXPECT_TRUE(h.done());
  // (At a world of 1 no one waits; comm_ledger_test covers the accounting with a slow backend.)
  if (!late) {
    EXPECT_GE(comm_->blocked_seconds(), 0.09) << "waited on a peer 100 ms late";
  }
  CommHandle none;
  EXPECT_FALSE(none.valid());
  EXPECT_TRUE(none.done());
  none.wait();  // an empty handle is already complete
  comm_->synchronize();
  EXPECT_EQ(comm_->ledger().size(), 1u);
  EXPECT_EQ(comm_->backend_name(), ring() ? "mpi-ring" : "mpi-native");
}

// Counts above the per-call limit are split into several MPI calls (INT_MAX in production; 100
// here): same values, same bytes.
TEST_P(Collectives, LargeCountsAreSplitIntoCalls) {
  comm_ = make_comm(100);
  for (GroupKind g : kKinds) {
    const Group& grp = topo_.group(g);
    const size_t n = size_t(grp.size()), me = size_t(grp.index);
    for (DType d : kTypes) {
      SCOPED_TRACE(::testing::Message() << group_name(g) << " " << dtype_name(d));
      const size_t count = 1001, m = 257;
      Buf a(d, count), b(d, count), rs_send(d, n * m), rs(d, m), ag_send(d, m), ag(d, n * m);
      for (size_t i = 0; i < count; ++i) a.set(i, value(topo_.rank(), i));
      for (size_t i = 0; i < count; ++i) b.set(i, value(topo_.rank(), i + 9));
      for (size_t i = 0; i < n * m; ++i) rs_send.set(i, value(topo_.rank(), i));
      for (size_t k = 0; k < m; ++k) ag_send.set(k, value(topo_.rank(), k));
      comm_->all_reduce(a.data(), count, d, g);
      check_last_entry(CollKind::kAllReduce, g, count, d);
      comm_->broadcast(b.data(), count, d, int(n) - 1, g);
      check_last_entry(CollKind::kBroadcast, g, count, d, int(n) - 1);
      Buf red(d, count);
      for (size_t i = 0; i < count; ++i) red.set(i, value(topo_.rank(), i));
      comm_->reduce_async(red.data(), count, d, int(n) - 1, g).wait();
      check_last_entry(CollKind::kReduce, g, count, d, int(n) - 1);
      for (size_t i = 0; i < count && me == n - 1; ++i) {
        float want = 0;
        for (int r : grp.ranks) want += value(r, i);
        EXPECT_EQ(red.get(i), want) << i;
      }
      comm_->reduce_scatter(rs_send.data(), rs.data(), m, d, g);
      check_last_entry(CollKind::kReduceScatter, g, n * m, d);
      comm_->all_gather(ag_send.data(), ag.data(), m, d, g);
      check_last_entry(CollKind::kAllGather, g, n * m, d);
      size_t bad = 0;
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int r : grp.ranks) want += value(r, i);
        bad += a.get(i) != want;
        bad += b.get(i) != value(grp.ranks.back(), i + 9);
      }
      for (size_t k = 0; k < m; ++k) {
        float want = 0;
        for (int r : grp.ranks) want += value(r, me * m + k);
        bad += rs.get(k) != want;
        for (size_t blk = 0; blk < n; ++blk) bad += ag.get(blk * m + k) != value(grp.ranks[blk], k);
      }
      EXPECT_EQ(bad, 0u);
    }
  }
}

// Chunks over the ring backend's slice size (512 KiB) run as up to 8 pipelined channels, each
// slice its own ring (NCCL's channels): odd counts whose chunks and slices are uneven, a
// reduce-scatter into its own block and an in-place all-gather, whole and cut into calls of at
// most 40000 elements. Same values and bytes as the closed forms.
TEST_P(Collectives, LargeCollectivesRunAsChannelsWithTheSameValuesAndBytes) {
  const size_t count = 2097169, m = 1048583;  // odd, divisible by none of 2..4
  for (size_t max_elems : {size_t(INT32_MAX), size_t(40000)}) {
    comm_.reset();  // a new Communicator numbers its ops from 0: start its ledger afresh
    ledger_.clear();
    comm_ = make_comm(max_elems);
    for (GroupKind g : kKinds) {
      const Group& grp = topo_.group(g);
      const size_t n = size_t(grp.size()), me = size_t(grp.index);
      for (DType d : kTypes) {
        SCOPED_TRACE(::testing::Message() << group_name(g) << " " << dtype_name(d) << " calls of "
                                          << max_elems);
        Buf a(d, count), rs(d, n * m), ag(d, n * m);
        for (size_t i = 0; i < count; ++i) a.set(i, value(topo_.rank(), i));
        for (size_t i = 0; i < n * m; ++i) rs.set(i, value(topo_.rank(), i));
        for (size_t k = 0; k < m; ++k) ag.set(me * m + k, value(topo_.rank(), k));
        comm_->all_reduce(a.data(), count, d, g);
        check_last_entry(CollKind::kAllReduce, g, count, d);
        comm_->reduce_scatter(rs.data(), rs.at(me * m), m, d, g);
        check_last_entry(CollKind::kReduceScatter, g, n * m, d);
        comm_->all_gather(ag.at(me * m), ag.data(), m, d, g);
        check_last_entry(CollKind::kAllGather, g, n * m, d);
        size_t bad = 0;
        for (size_t i = 0; i < count; ++i) bad += a.get(i) != group_sum(grp, i);
        for (size_t k = 0; k < m; ++k) {
          bad += rs.get(me * m + k) != group_sum(grp, me * m + k);
          for (size_t blk = 0; blk < n; ++blk) bad += ag.get(blk * m + k) != value(grp.ranks[blk], k);
        }
        EXPECT_EQ(bad, 0u);
      }
    }
  }
}

// Both backends see the same ops, so the native ledger's modelled split equals what the ring
// backend measures for the same calls.
TEST(CommBackends, NativeModelEqualsRingMeasurement) {
  const Topology topo = testing::test_topology();
  Ledger ring_ledger, native_ledger;
  for (CollectiveImpl impl : {CollectiveImpl::kRing, CollectiveImpl::kMpiNative}) {
    Ledger& ledger = impl == CollectiveImpl::kRing ? ring_ledger : native_ledger;
    Communicator comm(topo, make_mpi_backend(topo, impl), ledger);
    for (GroupKind g : kKinds) {
      const size_t n = size_t(topo.group(g).size());
      Buf buf(DType::kBF16, 1001), big(DType::kBF16, 7 * n), out(DType::kBF16, 7);
      comm.all_reduce_async(buf.data(), 1001, DType::kBF16, g);
      comm.reduce_scatter_async(big.data(), out.data(), 7, DType::kBF16, g);
      comm.all_gather_async(out.data(), big.data(), 7, DType::kBF16, g);
      comm.broadcast_async(buf.data(), 1001, DType::kBF16, 0, g);
      comm.synchronize();
    }
  }
  ASSERT_EQ(ring_ledger.size(), native_ledger.size());
  for (size_t k = 0; k < ring_ledger.size(); ++k) {
    const LedgerEntry &r = ring_ledger.entries()[k], &nat = native_ledger.entries()[k];
    EXPECT_EQ(r.kind, nat.kind);
    EXPECT_EQ(r.payload_bytes, nat.payload_bytes);
    EXPECT_EQ(r.sent.intra, nat.sent.intra) << k;
    EXPECT_EQ(r.sent.inter, nat.sent.inter) << k;
    EXPECT_TRUE(r.counted);
    EXPECT_FALSE(nat.counted);
  }
}

TEST(MpiRuntime, HelpersAgreeAcrossRanks) {
  const int n = g_runtime->world_size(), me = g_runtime->rank();
  EXPECT_EQ(g_runtime->max_over_ranks(double(me)), double(n - 1));
  EXPECT_EQ(g_runtime->sum_over_ranks(1.0), double(n));
  EXPECT_EQ(g_runtime->max_over_ranks_u64(uint64_t(me) << 40), uint64_t(n - 1) << 40);
  EXPECT_EQ(g_runtime->sum_over_ranks_u64(uint64_t(1) << 40), uint64_t(n) << 40);
  const std::vector<double> all = g_runtime->gather_to_root(double(me) * 2);
  if (me == 0) {
    ASSERT_EQ(all.size(), size_t(n));
    for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], 2.0 * r);
  } else {
    EXPECT_TRUE(all.empty());
  }
  std::string s = me == n - 1 ? std::string(5000, 'x') + "end" : "junk";
  g_runtime->broadcast_string(s, n - 1);
  EXPECT_EQ(s, std::string(5000, 'x') + "end");
  EXPECT_FALSE(g_runtime->library_version().empty());
  g_runtime->barrier();
}

TEST(MpiRuntime, SharedMemoryTopologyPartitionsTheWorld) {
  // Nodes from MPI_COMM_TYPE_SHARED (one node when every rank shares this host).
  const Topology t = g_runtime->topology(0);
  EXPECT_EQ(t.world_size(), g_runtime->world_size());
  EXPECT_EQ(t.rank(), g_runtime->rank());
  EXPECT_EQ(t.num_nodes() * t.ranks_per_node(), t.world_size());
  EXPECT_EQ(t.intra().size(), t.ranks_per_node());
  EXPECT_EQ(t.inter().size(), t.num_nodes());
  if (testing::g_ranks_per_node > 0) {
    EXPECT_EQ(testing::test_topology().ranks_per_node(), testing::g_ranks_per_node);
  }
}

INSTANTIATE_TEST_SUITE_P(Mpi, Collectives,
                         ::testing::Values(CollectiveImpl::kRing, CollectiveImpl::kMpiNative),
                         [](const auto& info) { return std::string(impl_name(info.param)); });

}  // namespace
}  // namespace sb
