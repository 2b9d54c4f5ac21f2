// The ring schedule (see header): which chunk each step moves. The passes each kind makes come
// from its row in collective.h.
#include "harness/comm/ring_schedule.h"

#include "harness/common/check.h"

namespace sb {

RingSchedule::RingSchedule(CollKind kind, size_t count, int n, int i, int root)
    : kind_(kind), count_(count), n_(n), i_(i), root_(root) {
  SB_CHECK(n >= 1 && i >= 0 && i < n, "ring position " << i << " of " << n);
  SB_CHECK(root >= 0 && root < n, "root " << root << " of " << n);
}

// Broadcast and reduce are pieced chains and all-to-all is pairwise (alltoall_send_peer):
// no ring steps.
int RingSchedule::steps() const {
  if (n_ <= 1) return 0;
  const CollectiveSpec& s = collective_spec(kind_);
  return s.algo == CollAlgo::kRing ? s.passes * (n_ - 1) : 0;
}

// A ring's all-gather pass comes after its reduce-scatter pass and restarts from step 0. At
// each step a position receives the chunk just before the one it sends.
int RingSchedule::send_index(int s) const {
  const CollectiveSpec& spec = collective_spec(kind_);
  const bool ag = !spec.rs_pass || s >= n_ - 1;
  if (spec.rs_pass && s >= n_ - 1) s -= n_ - 1;
  return ag ? i_ - s : i_ - 1 - s;
}

Chunk RingSchedule::send_chunk(int s) const { return chunk(send_index(s)); }
Chunk RingSchedule::recv_chunk(int s) const { return chunk(send_index(s) - 1); }

}  // namespace sb
