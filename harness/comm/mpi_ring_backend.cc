// The ring MPI backend: every collective executes RingSchedule as a ring of MPI_Sendrecv over
// the group's communicator, and each transfer is counted by hop class at the one send site
// (the *measurement* that the ring model in ledger.cc must equal). No Ledger, no memory
// tracker: scratch here is backend-private.
#include <algorithm>
#include <cstring>

#include "harness/comm/mpi_backend_base.h"

namespace sb::mpi_detail {
namespace {

// ---- ring: Sendrecv to the next position, from the previous one ----------------------------
class RingBackend final : public MpiBackendBase {
 public:
  using MpiBackendBase::MpiBackendBase;
  std::string name() const override { return "mpi-ring"; }

  BackendResult run(const CollectiveOp& op) override {
    sent_ = HopBytes{};
    op_ = &op;
    es_ = dtype_bytes(op.dtype);
    const bool counted = op.kind != CollKind::kBarrier;
    const int n = op.group->size();
    if (n == 1) {
      local_copy(op);
      return {sent_, counted};
    }
    switch (op.kind) {
      case CollKind::kAllReduce: all_reduce(); break;
      case CollKind::kReduceScatter: reduce_scatter(); break;
      case CollKind::kAllGather: all_gather(); break;
      case CollKind::kBroadcast: broadcast(); break;
      case CollKind::kReduce: reduce(); break;
      case CollKind::kAllToAll: all_to_all(); break;
      case CollKind::kBarrier:
        // after this barrier every rank of the group has reached it (no payload: not counted)
        MPI_Barrier(comm(*op.group));
        break;
    }
    return {sent_, counted};  // host transfers: the Communicator's wall clock is the time
  }

 private:
  char* at(void* base, size_t elem) const { return static_cast<char*>(base) + elem * es_; }
  const char* at(const void* base, size_t elem) const {
    return static_cast<const char*>(base) + elem * es_;
  }
  RingSchedule schedule() const {
    return RingSchedule(op_->kind, op_->count, op_->group->size(), op_->group->index,
                        op_->root_index);
  }

  // Sends scount elements to group position dst while receiving rcount from src (-1: none), in
  // pieces of at most max_elems_. The single send site: every byte sent is counted here.
  void xfer(const void* sbuf, size_t scount, int dst, void* rbuf, size_t rcount, int src) {
    const Group& g = *op_->group;
    if (dst < 0) scount = 0;
    if (src < 0) rcount = 0;
    for (size_t so = 0, ro = 0; so < scount || ro < rcount;) {
      const size_t sn = std::min(scount - so, max_elems_), rn = std::min(rcount - ro, max_elems_);
      MPI_Sendrecv(at(sbuf, so), int(sn), mpi_type(op_->dtype), sn ? dst : MPI_PROC_NULL, 0,
                   at(rbuf, ro), int(rn), mpi_type(op_->dtype), rn ? src : MPI_PROC_NULL, 0,
                   comm(g), MPI_STATUS_IGNORE);
      if (sn > 0) {
        const int me = g.ranks[g.index], peer = g.ranks[dst];
        (topo_.same_node(me, peer) ? sent_.intra : sent_.inter) += uint64_t(sn) * es_;
      }
      so += sn;
      ro += rn;
    }
  }

  // The reduce-scatter steps, each adding the received partial sum into the buffer: position
  // i then holds the full sum of chunk i; the all-gather steps hand it round.
  void all_reduce() {
    const RingSchedule ring = schedule();
    const int n = op_->group->size();
    void* buf = op_->recv;
    void* tmp = scratch(ring_chunk(op_->count, n, 0).len * es_, 0);
    for (int s = 0; s < ring.steps(); ++s) {
      const Chunk sc = ring.send_chunk(s), rc = ring.recv_chunk(s);
      if (s < n - 1) {
        xfer(at(buf, sc.begin), sc.len, ring.next(), tmp, rc.len, ring.prev());
        sum_to(at(buf, rc.begin), at(buf, rc.begin), tmp, rc.len, op_->dtype);
      } else {
        xfer(at(buf, sc.begin), sc.len, ring.next(), at(buf, rc.begin), rc.len, ring.prev());
      }
    }
  }

  // Step s: send the partial sum of the schedule's chunk, receive the next one and add own;
  // after n-1 steps position i holds the sum of chunk i. recv may alias block i of send (read
  // only at the last step, element by element, as it is written).
  void reduce_scatter() {
    const RingSchedule ring = schedule();
    const int n = op_->group->size();
    const size_t m = op_->count / size_t(n);
    void* acc = scratch(m * es_, 0);
    void* tmp = scratch(m * es_, 1);
    for (int s = 0; s < ring.steps(); ++s) {
      const Chunk sc = ring.send_chunk(s), rc = ring.recv_chunk(s);
      xfer(s == 0 ? at(op_->send, sc.begin) : acc, m, ring.next(), tmp, m, ring.prev());
      sum_to(s == n - 2 ? op_->recv : acc, tmp, at(op_->send, rc.begin), m, op_->dtype);
    }
  }

  void all_gather() {
    const RingSchedule ring = schedule();
    void* recv = op_->recv;
    const Chunk own = ring_chunk(op_->count, op_->group->size(), op_->group->index);
    if (op_->send != at(recv, own.begin))
      std::memmove(at(recv, own.begin), op_->send, own.len * es_);
    for (int s = 0; s < ring.steps(); ++s) {
      const Chunk sc = ring.send_chunk(s), rc = ring.recv_chunk(s);
      xfer(at(recv, sc.begin), sc.len, ring.next(), at(recv, rc.begin), rc.len, ring.prev());
    }
  }

  // The schedule's chain from the root, pipelined: piece k moves on while k+1 arrives.
  void broadcast() {
    const RingSchedule ring = schedule();
    const bool first = !ring.broadcast_receives();
    const int next = ring.broadcast_sends() ? ring.next() : -1;
    const int prev = ring.broadcast_receives() ? ring.prev() : -1;
    const size_t piece = std::min(max_elems_, std::max<size_t>(1, kBroadcastPieceBytes / es_));
    const size_t pieces = (op_->count + piece - 1) / piece;
    void* buf = op_->recv;
    auto len = [&](size_t k) { return std::min(piece, op_->count - k * piece); };
    for (size_t t = 0; t <= pieces; ++t) {
      const bool send = (first ? t < pieces : t >= 1), recv = !first && t < pieces;
      const size_t sk = first ? t : t - 1;
      xfer(send ? at(buf, sk * piece) : nullptr, send ? len(sk) : 0, next,
           recv ? at(buf, t * piece) : nullptr, recv ? len(t) : 0, prev);
    }
  }

  // The schedule's chain to the root, pipelined as the broadcast's: at step t a position sends
  // its partial sum of piece t-1 (the chain's first: its own piece t) while receiving piece t
  // from its predecessor, then adds its own elements. Partial sums live in scratch, so only the
  // root's buffer changes (it receives the full sum, added in place).
  void reduce() {
    const RingSchedule ring = schedule();
    const bool first = !ring.reduce_receives(), root = !ring.reduce_sends();
    const int next = root ? -1 : ring.next(), prev = first ? -1 : ring.prev();
    const size_t piece = std::min(max_elems_, std::max<size_t>(1, kBroadcastPieceBytes / es_));
    const size_t pieces = (op_->count + piece - 1) / piece;
    void* buf = op_->recv;
    char* acc = static_cast<char*>(scratch(op_->count * es_, 0));  // partial sums, by piece
    auto len = [&](size_t k) { return std::min(piece, op_->count - k * piece); };
    for (size_t t = 0; t <= pieces; ++t) {
      const bool send = !root && (first ? t < pieces : t >= 1), recv = !first && t < pieces;
      const size_t sk = first ? t : t - 1;
      const void* from = first ? at(static_cast<const void*>(buf), sk * piece) : acc + sk * piece * es_;
      xfer(send ? from : nullptr, send ? len(sk) : 0, next, recv ? acc + t * piece * es_ : nullptr,
           recv ? len(t) : 0, prev);
      if (recv) {
        char* dst = root ? at(buf, t * piece) : acc + t * piece * es_;
        sum_to(dst, acc + t * piece * es_, at(buf, t * piece), len(t), op_->dtype);
      }
    }
  }

  // The pairwise schedule (alltoall_send_peer): own block copied, then at step s block i+s
  // goes to position i+s while block i-s arrives from position i-s.
  void all_to_all() {
    const int n = op_->group->size(), i = op_->group->index;
    const size_t m = op_->count / size_t(n);
    std::memcpy(at(op_->recv, size_t(i) * m), at(op_->send, size_t(i) * m), m * es_);
    for (int s = 1; s < n; ++s) {
      const int dst = alltoall_send_peer(n, i, s), src = alltoall_recv_peer(n, i, s);
      xfer(at(op_->send, size_t(dst) * m), m, dst, at(op_->recv, size_t(src) * m), m, src);
    }
  }

  const CollectiveOp* op_ = nullptr;
  size_t es_ = 4;
  HopBytes sent_;
};

}  // namespace

std::unique_ptr<CommBackend> make_ring_backend(const Topology& topo, size_t max_elems) {
  return std::make_unique<RingBackend>(topo, max_elems);
}

}  // namespace sb::mpi_detail
