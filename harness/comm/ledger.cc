// The ring model: which chunks a rank sends in each ring collective and over which hop class,
// mirroring the schedule of the ring backend (mpi_backend.cc) step for step. Pure arithmetic:
// no MPI, no timing; the Ledger itself is a plain list with sums.
#include "harness/comm/ledger.h"

#include <algorithm>

#include "harness/common/check.h"

namespace sb {

const char* coll_name(CollKind k) {
  switch (k) {
    case CollKind::kAllReduce: return "all_reduce";
    case CollKind::kReduceScatter: return "reduce_scatter";
    case CollKind::kAllGather: return "all_gather";
    case CollKind::kBroadcast: return "broadcast";
    case CollKind::kBarrier: return "barrier";
  }
  return "?";
}

Chunk ring_chunk(size_t count, int n, int c) {
  SB_CHECK(n >= 1 && c >= 0 && c < n, "ring chunk " << c << " of " << n);
  const size_t base = count / size_t(n), rem = count % size_t(n), uc = size_t(c);
  return Chunk{uc * base + std::min(uc, rem), base + (uc < rem ? 1 : 0)};
}

namespace {
int wrap(int i, int n) { return ((i % n) + n) % n; }
}  // namespace

// Schedule (position i in the group of n, steps s = 0..n-2; see mpi_backend.cc):
//   reduce-scatter: send chunk i-1-s  -> after n-1 steps position i holds the sum of chunk i;
//   all-gather:     send chunk i-s    -> after n-1 steps every position holds every chunk;
//   all-reduce:     reduce-scatter then all-gather over ring_chunk(count, n, .);
//   broadcast:      chain root -> root+1 -> ... -> root+n-1; all but the last send everything.
// Every send goes to the next position, so one hop class takes all of this rank's bytes.
HopBytes ring_model_sent(CollKind kind, size_t count, DType dtype, const Group& group,
                         const Topology& topo, int root_index) {
  const int n = group.size(), i = group.index;
  HopBytes out;
  if (n <= 1 || kind == CollKind::kBarrier) return out;
  SB_CHECK(i >= 0 && i < n, "group index " << i << " outside a group of " << n);
  uint64_t elems = 0;
  switch (kind) {
    case CollKind::kReduceScatter:
      for (int s = 0; s < n - 1; ++s) elems += ring_chunk(count, n, wrap(i - 1 - s, n)).len;
      break;
    case CollKind::kAllGather:
      for (int s = 0; s < n - 1; ++s) elems += ring_chunk(count, n, wrap(i - s, n)).len;
      break;
    case CollKind::kAllReduce:
      for (int s = 0; s < n - 1; ++s)
        elems +=
            ring_chunk(count, n, wrap(i - 1 - s, n)).len + ring_chunk(count, n, wrap(i - s, n)).len;
      break;
    case CollKind::kBroadcast:
      SB_CHECK(root_index >= 0 && root_index < n, "broadcast root " << root_index);
      if (wrap(i - root_index, n) != n - 1) elems = count;
      break;
    case CollKind::kBarrier: break;
  }
  const uint64_t bytes = elems * dtype_bytes(dtype);
  const int me = group.ranks[i], next = group.ranks[wrap(i + 1, n)];
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
