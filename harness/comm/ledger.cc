// The ring model's bytes per rank (collective.h's closed form, classed by hop) and the
// Ledger's sums. Pure arithmetic: no MPI, no timing.
#include "harness/comm/ledger.h"

#include "harness/common/check.h"

namespace sb {

// Every send of the ring goes to the next position, so one hop class takes all of this rank's
// bytes: RingSchedule's per-position total, classed by the hop to the successor.
HopBytes ring_model_sent(CollKind kind, size_t count, DType dtype, const Group& group,
                         const Topology& topo, int root_index) {
  const int n = group.size(), i = group.index;
  const CollAlgo algo = collective_spec(kind).algo;
  HopBytes out;
  if (n <= 1 || algo == CollAlgo::kNone) return out;
  if (algo == CollAlgo::kPairwise) {  // one block to every other position, classed per peer
    const uint64_t block = alltoall_block_elements(count, n) * dtype_bytes(dtype);
    for (int s = 1; s < n; ++s) {
      const int peer = group.ranks[alltoall_send_peer(n, i, s)];
      (topo.same_node(group.ranks[i], peer) ? out.intra : out.inter) += block;
    }
    return out;
  }
  const uint64_t bytes = position_sent_elements(kind, count, n, i, root_index) * dtype_bytes(dtype);
  const int me = group.ranks[i], next = group.ranks[(i + 1) % n];
  (topo.same_node(me, next) ? out.intra : out.inter) = bytes;
  return out;
}

uint64_t Ledger::payload_bytes(size_t from) const {
  uint64_t sum = 0;
  for (size_t k = from; k < entries_.size(); ++k) sum += entries_[k].payload_bytes;
  return sum;
}

HopBytes Ledger::sent(size_t from) const {
  HopBytes sum;
  for (size_t k = from; k < entries_.size(); ++k) {
    sum.intra += entries_[k].sent.intra;
    sum.inter += entries_[k].sent.inter;
  }
  return sum;
}

}  // namespace sb
