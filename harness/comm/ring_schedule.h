// The ring schedule of every collective, written once: which chunk position i of a group of n
// sends to its successor and receives from its predecessor at each step. The MPI ring backend
// executes it, the ledger counts it (ring_model_sent), the predictor's simulated backend times
// it (traffic.cc) and the two-host link model sums its messages (link_counter.cc).
// The per-kind passes and byte formulas it follows are in collective.h (written once there).
#pragma once

#include <cstddef>
#include <cstdint>

#include "harness/comm/collective.h"

namespace sb {

// The broadcast and reduce chains move pieces of this many bytes (piece k moves on while k+1
// arrives).
constexpr size_t kBroadcastPieceBytes = size_t(1) << 19;

// All-to-all is no ring: position i sends block j of its buffer (count / n elements) to
// position j and receives block j of its output from position j. The pairwise schedule: at
// step s = 1..n-1 it sends to i+s and receives from i-s (mod n), so every step is a matched
// pair and no position waits on two peers. Each position sends (n-1)/n of its buffer, each
// block to its own peer, so the hop class is per peer (ledger.cc, link_counter.cc).
inline int alltoall_send_peer(int n, int i, int s) { return (i + s) % n; }
inline int alltoall_recv_peer(int n, int i, int s) { return ((i - s) % n + n) % n; }

class RingSchedule {
 public:
  // count as in LedgerEntry (all-reduce/broadcast buffer, reduce-scatter input, all-gather
  // output); position i of n; root: broadcast root position.
  RingSchedule(CollKind kind, size_t count, int n, int i, int root = 0);

  int next() const { return wrap(i_ + 1); }  // every send goes here
  int prev() const { return wrap(i_ - 1); }  // every receive comes from here
  // Send/receive steps (0 for a group of one and for barrier, broadcast and reduce, whose
  // chains are pieced: broadcast_sends(), reduce_sends()):
  //   reduce-scatter s < n-1: send chunk i-1-s, receive chunk i-2-s and add own -> position i
  //                           holds the sum of chunk i;
  //   all-gather     s < n-1: send chunk i-s, receive chunk i-1-s -> every chunk everywhere;
  //   all-reduce     s < 2(n-1): the reduce-scatter steps, then the all-gather steps.
  int steps() const;
  Chunk send_chunk(int s) const;
  Chunk recv_chunk(int s) const;
  // Broadcast: the chain root -> root+1 -> ... -> root+n-1; all but the last send everything.
  bool broadcast_sends() const { return n_ > 1 && wrap(i_ - root_) != n_ - 1; }
  bool broadcast_receives() const { return n_ > 1 && i_ != root_; }
  // Reduce: the chain root+1 -> root+2 -> ... -> root, each adding its own elements to the
  // partial sum it passes on; every position but the root sends the whole buffer once.
  bool reduce_sends() const { return n_ > 1 && i_ != root_; }
  bool reduce_receives() const { return n_ > 1 && wrap(i_ - root_) != 1; }
  // Elements this position sends over the whole collective, in O(1) (the sum over steps):
  // position_sent_elements (collective.h).
  uint64_t sent_elements() const {
    return position_sent_elements(kind_, count_, n_, i_, root_);
  }

 private:
  int send_index(int s) const;  // the chunk sent at step s, before wrapping
  int wrap(int x) const { return ((x % n_) + n_) % n_; }
  Chunk chunk(int c) const { return ring_chunk(count_, n_, wrap(c)); }
  CollKind kind_;
  size_t count_;
  int n_, i_, root_;
};

}  // namespace sb
