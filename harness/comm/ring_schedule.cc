// The ring schedule (see header): chunk arithmetic and its per-position closed forms.
#include "harness/comm/ring_schedule.h"

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
    case CollKind::kReduce: return "reduce";
    case CollKind::kAllToAll: return "all_to_all";
  }
  return "?";
}

Chunk ring_chunk(size_t count, int n, int c) {
  SB_CHECK(n >= 1 && c >= 0 && c < n, "ring chunk " << c << " of " << n);
  const size_t base = count / size_t(n), rem = count % size_t(n), uc = size_t(c);
  return Chunk{uc * base + std::min(uc, rem), base + (uc < rem ? 1 : 0)};
}

RingSchedule::RingSchedule(CollKind kind, size_t count, int n, int i, int root)
    : kind_(kind), count_(count), n_(n), i_(i), root_(root) {
  SB_CHECK(n >= 1 && i >= 0 && i < n, "ring position " << i << " of " << n);
  SB_CHECK(root >= 0 && root < n, "root " << root << " of " << n);
}

int RingSchedule::steps() const {
  if (n_ <= 1) return 0;
  switch (kind_) {
    case CollKind::kReduceScatter:
    case CollKind::kAllGather: return n_ - 1;
    case CollKind::kAllReduce: return 2 * (n_ - 1);
    case CollKind::kBroadcast:
    case CollKind::kReduce:
    case CollKind::kBarrier:
    case CollKind::kAllToAll: return 0;  // pairwise, not a ring (alltoall_send_peer)
  }
  return 0;
}

// All-reduce's second half is the all-gather schedule from step 0 again.
Chunk RingSchedule::send_chunk(int s) const {
  const bool second_half = kind_ == CollKind::kAllReduce && s >= n_ - 1;
  if (second_half) s -= n_ - 1;
  return kind_ == CollKind::kAllGather || second_half ? chunk(i_ - s) : chunk(i_ - 1 - s);
}

Chunk RingSchedule::recv_chunk(int s) const {
  const bool second_half = kind_ == CollKind::kAllReduce && s >= n_ - 1;
  if (second_half) s -= n_ - 1;
  return kind_ == CollKind::kAllGather || second_half ? chunk(i_ - 1 - s) : chunk(i_ - 2 - s);
}

uint64_t RingSchedule::sent_elements() const {
  if (n_ <= 1) return 0;
  const uint64_t own = chunk(i_).len, succ = chunk(i_ + 1).len, c = count_;
  switch (kind_) {
    case CollKind::kReduceScatter: return c - own;   // every chunk but its own
    case CollKind::kAllGather: return c - succ;      // every chunk but its successor's
    case CollKind::kAllReduce: return 2 * c - own - succ;
    case CollKind::kBroadcast: return broadcast_sends() ? c : 0;
    case CollKind::kReduce: return reduce_sends() ? c : 0;
    case CollKind::kBarrier: return 0;
    case CollKind::kAllToAll: return c - c / uint64_t(n_);  // every block but its own
  }
  return 0;
}

}  // namespace sb
