// The per-kind table and the byte formulas every counter reads (see header).
#include "harness/comm/collective.h"

#include <algorithm>

#include "harness/common/check.h"

namespace sb {
namespace {

// One row per kind, in CollKind order.
constexpr CollectiveSpec kSpecs[kNumCollKinds] = {
    {CollKind::kAllReduce, "all_reduce", CollAlgo::kRing, 2, true, true, ChainIdle::kNone},
    {CollKind::kReduceScatter, "reduce_scatter", CollAlgo::kRing, 1, true, false, ChainIdle::kNone},
    {CollKind::kAllGather, "all_gather", CollAlgo::kRing, 1, false, true, ChainIdle::kNone},
    {CollKind::kBroadcast, "broadcast", CollAlgo::kChain, 1, false, false, ChainIdle::kLast},
    {CollKind::kBarrier, "barrier", CollAlgo::kNone, 0, false, false, ChainIdle::kNone},
    {CollKind::kReduce, "reduce", CollAlgo::kChain, 1, false, false, ChainIdle::kRoot},
    {CollKind::kAllToAll, "all_to_all", CollAlgo::kPairwise, 1, false, false, ChainIdle::kNone},
};

}  // namespace

const CollectiveSpec& collective_spec(CollKind k) {
  const int i = int(k);
  SB_CHECK(i >= 0 && i < kNumCollKinds && kSpecs[i].kind == k, "collective kind " << i);
  return kSpecs[i];
}

const char* coll_name(CollKind k) {
  const int i = int(k);
  return i >= 0 && i < kNumCollKinds ? kSpecs[i].name : "?";
}

double busbw_factor(CollKind k, int n) {
  const CollectiveSpec& s = collective_spec(k);
  if (s.algo == CollAlgo::kChain) return 1.0;
  return s.passes * double(n - 1) / n;
}

Chunk ring_chunk(size_t count, int n, int c) {
  SB_CHECK(n >= 1 && c >= 0 && c < n, "ring chunk " << c << " of " << n);
  const size_t base = count / size_t(n), rem = count % size_t(n), uc = size_t(c);
  return Chunk{uc * base + std::min(uc, rem), base + (uc < rem ? 1 : 0)};
}

uint64_t position_sent_elements(CollKind k, uint64_t count, int n, int i, int root) {
  if (n <= 1) return 0;
  const CollectiveSpec& s = collective_spec(k);
  const auto len = [&](int c) { return uint64_t(ring_chunk(size_t(count), n, c % n).len); };
  const int from_root = ((i - root) % n + n) % n;
  switch (s.algo) {
    case CollAlgo::kNone: return 0;
    case CollAlgo::kRing:
      return (s.rs_pass ? count - len(i) : 0) + (s.ag_pass ? count - len(i + 1) : 0);
    case CollAlgo::kChain:
      return (s.idle == ChainIdle::kLast && from_root == n - 1) ||
                     (s.idle == ChainIdle::kRoot && from_root == 0)
                 ? 0
                 : count;
    case CollAlgo::kPairwise: return count - alltoall_block_elements(count, n);
  }
  return 0;
}

uint64_t max_position_sent_elements(CollKind k, uint64_t count, int n) {
  if (n <= 1) return 0;
  const CollectiveSpec& s = collective_spec(k);
  if (s.algo == CollAlgo::kChain) return count;
  if (s.algo == CollAlgo::kPairwise) return count - alltoall_block_elements(count, n);
  return uint64_t(s.passes) * (count - count / uint64_t(n));
}

uint64_t group_sent_elements(CollKind k, uint64_t count, int n) {
  if (n <= 1) return 0;
  const CollectiveSpec& s = collective_spec(k);
  if (s.algo == CollAlgo::kPairwise)
    return uint64_t(n) * (count - alltoall_block_elements(count, n));
  return uint64_t(s.algo == CollAlgo::kChain ? 1 : s.passes) * uint64_t(n - 1) * count;
}

}  // namespace sb
