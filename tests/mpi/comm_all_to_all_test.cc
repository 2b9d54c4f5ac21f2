// Multi-rank tests of the all-to-all collective over both MPI backends (ring: pairwise sends;
// native: MPI_Alltoall): every block lands at its peer in group order on every group kind, at
// odd block sizes, through the split of large counts, and the ledger's bytes equal the per-peer
// closed form: a rank sends one block of count/n to each of the n-1 others, intra for the peers
// on its node and inter for the rest, so (n-1)/n of its buffer in all (tests/closed_forms.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/comm/mpi_runtime.h"
#include "tests/mpi/mpi_env.h"

namespace sb {
namespace {

using testing::g_runtime;

constexpr GroupKind kKinds[] = {GroupKind::kWorld, GroupKind::kIntra, GroupKind::kInter};
// Block sizes: 1, odd, and odd over 1 MiB of fp32 blocks; none divides by 2, 3 or 4.
constexpr size_t kBlocks[] = {1, 7, 1001, 262147};

// The byte block j of rank r holds: distinct per (rank, block, element), so a block delivered to
// the wrong peer or at the wrong offset is caught.
uint8_t code(int world_rank, size_t block, size_t k) {
  return uint8_t((world_rank * 131 + block * 29 + k * 7 + 3) % 251);
}

class AllToAll : public ::testing::TestWithParam<CollectiveImpl> {
 protected:
  std::unique_ptr<Communicator> make_comm(size_t max_elems) {
    return std::make_unique<Communicator>(topo_, make_mpi_backend(topo_, GetParam(), max_elems),
                                          ledger_);
  }

  // Runs one all-to-all of `m`-element blocks of dtype d (its bytes, viewed as codes) and checks
  // the data and the ledger entry.
  void run_and_check(Communicator& comm, GroupKind g, size_t m, DType d) {
    const Group& grp = topo_.group(g);
    const size_t n = size_t(grp.size()), es = dtype_bytes(d), bm = m * es;
    SCOPED_TRACE(::testing::Message() << group_name(g) << " " << dtype_name(d) << " m=" << m);
    std::vector<uint8_t> send(n * bm), recv(n * bm, 0xEE);
    for (size_t b = 0; b < n; ++b)
      for (size_t k = 0; k < bm; ++k) send[b * bm + k] = code(topo_.rank(), b, k);
    comm.all_to_all(send.data(), recv.data(), m, d, g, "a2a");
    comm.synchronize();
    size_t bad = 0;
    for (size_t j = 0; j < n; ++j)  // block j from group rank j: its block for my index
      for (size_t k = 0; k < bm; ++k)
        bad += recv[j * bm + k] != code(grp.ranks[j], size_t(grp.index), k);
    EXPECT_EQ(bad, 0u);

    const LedgerEntry& e = ledger_.entries().back();
    EXPECT_EQ(e.kind, CollKind::kAllToAll);
    EXPECT_EQ(e.group, g);
    EXPECT_EQ(e.count, n * m);
    EXPECT_EQ(e.payload_bytes, n * bm);
    EXPECT_EQ(e.counted, GetParam() == CollectiveImpl::kRing);
    // Closed form: peers on my node get intra bytes, the others inter.
    uint64_t on_node = 0;
    for (int r : grp.ranks) on_node += topo_.same_node(topo_.rank(), r);
    EXPECT_EQ(e.sent.intra, (on_node - 1) * bm);
    EXPECT_EQ(e.sent.inter, (n - on_node) * bm);
    const HopBytes model = ring_model_sent(CollKind::kAllToAll, n * m, d, grp, topo_);
    EXPECT_EQ(e.sent.intra, model.intra);
    EXPECT_EQ(e.sent.inter, model.inter);
    const uint64_t groups = uint64_t(topo_.world_size()) / n;
    EXPECT_EQ(g_runtime->sum_over_ranks_u64(e.sent.total()), groups * n * (n - 1) * bm);
  }

  Topology topo_ = testing::test_topology();
  Ledger ledger_;
};

TEST_P(AllToAll, EveryBlockReachesItsPeer) {
  auto comm = make_comm(size_t(INT32_MAX));
  for (GroupKind g : kKinds)
    for (DType d : {DType::kI8, DType::kBF16, DType::kF32})
      for (size_t m : kBlocks) run_and_check(*comm, g, m, d);
}

TEST_P(AllToAll, LargeBlocksAreSplitIntoCalls) {
  auto comm = make_comm(100);
  for (GroupKind g : kKinds) run_and_check(*comm, g, 257, DType::kBF16);
}

// Issued asynchronously with other collectives, it runs in issue order on the comm stream.
TEST_P(AllToAll, AsyncInIssueOrderWithOtherCollectives) {
  auto comm = make_comm(size_t(INT32_MAX));
  const size_t n = size_t(topo_.world().size());
  std::vector<float> buf(5, 1.0f);
  std::vector<uint8_t> send(n * 3, uint8_t(topo_.rank())), recv(n * 3, 0);
  CommHandle a = comm->all_reduce_async(buf.data(), 5, DType::kF32, GroupKind::kWorld);
  CommHandle b = comm->all_to_all_async(send.data(), recv.data(), 3, DType::kI8, GroupKind::kWorld);
  b.wait();
  EXPECT_TRUE(a.done());
  for (size_t j = 0; j < n; ++j) EXPECT_EQ(recv[j * 3 + 2], uint8_t(topo_.world().ranks[j]));
  comm->synchronize();
  ASSERT_GE(ledger_.size(), 2u);
  EXPECT_EQ(ledger_.entries()[ledger_.size() - 1].kind, CollKind::kAllToAll);
  EXPECT_EQ(ledger_.entries()[ledger_.size() - 2].kind, CollKind::kAllReduce);
}

INSTANTIATE_TEST_SUITE_P(Mpi, AllToAll,
                         ::testing::Values(CollectiveImpl::kRing, CollectiveImpl::kMpiNative),
                         [](const auto& info) {
                           return std::string(info.param == CollectiveImpl::kRing ? "ring"
                                                                                  : "native");
                         });

}  // namespace
}  // namespace sb
