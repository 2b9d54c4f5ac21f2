// The ring MPI backend: every collective executes RingSchedule over the group's communicator
// with MPI point-to-point calls (large ring collectives as pipelined channels, all-to-all with
// every block in flight), and each transfer is counted by hop class at the one send site, post()
// (the *measurement* that the ring model in ledger.cc must equal). No Ledger, no memory
// tracker: scratch here is backend-private.
#include <algorithm>
#include <cstring>
#include <vector>

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
  // pieces of at most max_elems_, one piece at a time (the broadcast and reduce chains).
  void xfer(const void* sbuf, size_t scount, int dst, void* rbuf, size_t rcount, int src) {
    if (dst < 0) scount = 0;
    if (src < 0) rcount = 0;
    for (size_t so = 0, ro = 0; so < scount || ro < rcount;) {
      const size_t sn = std::min(scount - so, max_elems_), rn = std::min(rcount - ro, max_elems_);
      MPI_Request req[2];
      post(at(sbuf, so), sn, dst, at(rbuf, ro), rn, src, 0, req);
      MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
      so += sn;
      ro += rn;
    }
  }

  // Starts one send of sn elements to position dst and one receive of rn from src (either may
  // be empty: MPI_REQUEST_NULL), tagged with the ring channel. The single send site: every
  // byte sent is counted here.
  void post(const void* sbuf, size_t sn, int dst, void* rbuf, size_t rn, int src, int tag,
            MPI_Request req[2]) {
    const Group& g = *op_->group;
    req[0] = req[1] = MPI_REQUEST_NULL;
    if (sn > 0) {
      MPI_Isend(sbuf, int(sn), mpi_type(op_->dtype), dst, tag, comm(g), &req[0]);
      const int me = g.ranks[g.index], peer = g.ranks[dst];
      (topo_.same_node(me, peer) ? sent_.intra : sent_.inter) += uint64_t(sn) * es_;
    }
    if (rn > 0) MPI_Irecv(rbuf, int(rn), mpi_type(op_->dtype), src, tag, comm(g), &req[1]);
  }

  // ---- channels: the ring steps of a large collective, pipelined ----------------------------
  // As NCCL splits a collective over its channels (src/device/all_reduce.h, runRing: channel
  // `bid` takes its own part of every chunk, and each channel is a ring going at its own pace),
  // every step's chunk is cut into slices and slice c goes round its own ring (channel c, MPI
  // tag c): channel c takes its next step as soon as its own slice has arrived, not when the
  // whole chunk has. With one blocking exchange per step, a step waited for its slower
  // direction before anything more was sent; where ranks share a host's link (two 2-rank rings
  // over one shaped veth: MiCS's and HSDP's replica all-reduce) the link then idled: MiCS took
  // 0.92 s for 0.71 s of bytes at 0.2 Gb/s (docs/network.md).
  static constexpr size_t kSliceBytes = size_t(1) << 19;
  static constexpr int kMaxChannels = 8;

  int channels_for(size_t chunk_elems) const {
    const size_t want = (chunk_elems * es_ + kSliceBytes - 1) / kSliceBytes;
    return int(std::clamp<size_t>(want, 1, kMaxChannels));
  }
  static Chunk slice(Chunk chunk, int channels, int c) {
    const Chunk s = ring_chunk(chunk.len, channels, c);
    return Chunk{chunk.begin + s.begin, s.len};
  }

  // One channel's step: what it sends (elements from send) and where it receives.
  struct SliceXfer {
    const void* send;
    size_t scount;
    void* recv;
    size_t rcount;
  };

  // Channels for a ring collective whose largest chunk has `chunk_elems` elements, and the MPI
  // calls each slice needs (max_elems_ limits each).
  struct ChannelPlan {
    int channels;
    size_t pieces;
  };
  ChannelPlan plan_channels(size_t chunk_elems) const {
    const int k = channels_for(chunk_elems);
    const size_t slice_max = (chunk_elems + size_t(k) - 1) / size_t(k);
    return {k, std::max<size_t>(1, (slice_max + max_elems_ - 1) / max_elems_)};
  }

  // Runs `steps` steps on each of the plan's channels: xfer_of(c, s) says what step s of
  // channel c moves, then done(c, s) runs once both its transfers are complete (the reduction).
  template <class XferOf, class Done>
  void run_channels(ChannelPlan plan, int steps, XferOf xfer_of, Done done) {
    const RingSchedule ring = schedule();
    const int channels = plan.channels;
    const size_t pieces_max = plan.pieces;
    std::vector<MPI_Request> req(size_t(channels) * pieces_max * 2, MPI_REQUEST_NULL);
    std::vector<int> step(size_t(channels), 0), pending(size_t(channels), 0);
    auto start = [&](int c) {
      const SliceXfer x = xfer_of(c, step[size_t(c)]);
      MPI_Request* r = &req[size_t(c) * pieces_max * 2];
      for (size_t k = 0; k < pieces_max; ++k) {
        const size_t so = k * max_elems_;
        const size_t sn = so < x.scount ? std::min(x.scount - so, max_elems_) : 0;
        const size_t rn = so < x.rcount ? std::min(x.rcount - so, max_elems_) : 0;
        post(at(x.send, so), sn, ring.next(), at(x.recv, so), rn, ring.prev(), c, r + 2 * k);
        pending[size_t(c)] += (sn > 0) + (rn > 0);
      }
    };
    // channel c's step is complete: reduce, start the next; a step with nothing to move (a
    // zero-length chunk) completes at once
    auto finish_step = [&](int c) {
      do {
        done(c, step[size_t(c)]);
        if (++step[size_t(c)] < steps) start(c);
      } while (pending[size_t(c)] == 0 && step[size_t(c)] < steps);
    };
    int live = 0;
    for (int c = 0; c < channels && steps > 0; ++c) {
      start(c);
      if (pending[size_t(c)] == 0) finish_step(c);
      live += step[size_t(c)] < steps;
    }
    while (live > 0) {
      int idx = MPI_UNDEFINED;
      MPI_Waitany(int(req.size()), req.data(), &idx, MPI_STATUS_IGNORE);
      SB_CHECK(idx != MPI_UNDEFINED, "ring channels: no transfer left with steps to run");
      const int c = idx / int(pieces_max * 2);
      if (--pending[size_t(c)] > 0) continue;
      finish_step(c);
      live -= step[size_t(c)] >= steps;
    }
  }

  // The reduce-scatter steps, each adding the received partial sum into the buffer: position
  // i then holds the full sum of chunk i; the all-gather steps hand it round.
  void all_reduce() {
    const RingSchedule ring = schedule();
    const int n = op_->group->size();
    const size_t largest = ring_chunk(op_->count, n, 0).len;
    const ChannelPlan plan = plan_channels(largest);
    const int k = plan.channels;
    const size_t slot = ring_chunk(largest, k, 0).len;  // a channel's share of tmp
    char* buf = static_cast<char*>(op_->recv);
    char* tmp = static_cast<char*>(scratch(size_t(k) * slot * es_, 0));
    run_channels(
        plan, ring.steps(),
        [&](int c, int s) {
          const Chunk sc = slice(ring.send_chunk(s), k, c), rc = slice(ring.recv_chunk(s), k, c);
          void* into = s < n - 1 ? at(tmp, size_t(c) * slot) : at(buf, rc.begin);
          return SliceXfer{at(buf, sc.begin), sc.len, into, rc.len};
        },
        [&](int c, int s) {
          if (s >= n - 1) return;
          const Chunk rc = slice(ring.recv_chunk(s), k, c);
          sum_to(at(buf, rc.begin), at(buf, rc.begin), at(tmp, size_t(c) * slot), rc.len,
                 op_->dtype);
        });
  }

  // Step s: send the partial sum of the schedule's chunk, receive the next one and add own;
  // after n-1 steps position i holds the sum of chunk i. recv may alias block i of send (read
  // only at the last step, element by element, as it is written). Channel c keeps slice c of
  // every block (the same elements of acc, tmp and recv at every step).
  void reduce_scatter() {
    const RingSchedule ring = schedule();
    const int n = op_->group->size();
    const size_t m = op_->count / size_t(n);
    const ChannelPlan plan = plan_channels(m);
    const int k = plan.channels;
    char* acc = static_cast<char*>(scratch(m * es_, 0));
    char* tmp = static_cast<char*>(scratch(m * es_, 1));
    const char* send = static_cast<const char*>(op_->send);
    char* recv = static_cast<char*>(op_->recv);
    run_channels(
        plan, ring.steps(),
        [&](int c, int s) {
          const Chunk part = slice(Chunk{0, m}, k, c);
          const void* from =
              s == 0 ? at(send, ring.send_chunk(s).begin + part.begin) : at(acc, part.begin);
          return SliceXfer{from, part.len, at(tmp, part.begin), part.len};
        },
        [&](int c, int s) {
          const Chunk part = slice(Chunk{0, m}, k, c);
          void* dst = s == n - 2 ? at(recv, part.begin) : at(acc, part.begin);
          sum_to(dst, at(tmp, part.begin), at(send, ring.recv_chunk(s).begin + part.begin),
                 part.len, op_->dtype);
        });
  }

  void all_gather() {
    const RingSchedule ring = schedule();
    char* recv = static_cast<char*>(op_->recv);
    const int n = op_->group->size();
    const Chunk own = ring_chunk(op_->count, n, op_->group->index);
    if (op_->send != at(recv, own.begin))
      std::memmove(at(recv, own.begin), op_->send, own.len * es_);
    const ChannelPlan plan = plan_channels(ring_chunk(op_->count, n, 0).len);
    const int k = plan.channels;
    run_channels(
        plan, ring.steps(),
        [&](int c, int s) {
          const Chunk sc = slice(ring.send_chunk(s), k, c), rc = slice(ring.recv_chunk(s), k, c);
          return SliceXfer{at(recv, sc.begin), sc.len, at(recv, rc.begin), rc.len};
        },
        [](int, int) {});
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

  // Every block in flight at once, as PyTorch's all_to_all_single posts one send and one
  // receive per peer in a single NCCL group (torch/csrc/cuda/nccl.cpp,
  // all2all_single_equal_split); posted in the pairwise order (alltoall_send_peer). One step
  // at a time, a step waited for its slowest peer while the others' links idled.
  void all_to_all() {
    const int n = op_->group->size(), i = op_->group->index;
    const size_t m = op_->count / size_t(n);
    std::memcpy(at(op_->recv, size_t(i) * m), at(op_->send, size_t(i) * m), m * es_);
    const size_t pieces = std::max<size_t>(1, (m + max_elems_ - 1) / max_elems_);
    std::vector<MPI_Request> req(size_t(n - 1) * pieces * 2, MPI_REQUEST_NULL);
    for (int s = 1; s < n; ++s) {
      const int dst = alltoall_send_peer(n, i, s), src = alltoall_recv_peer(n, i, s);
      for (size_t k = 0; k < pieces; ++k) {
        const size_t o = k * max_elems_, len = o < m ? std::min(m - o, max_elems_) : 0;
        post(at(op_->send, size_t(dst) * m + o), len, dst, at(op_->recv, size_t(src) * m + o),
             len, src, 0, &req[(size_t(s - 1) * pieces + k) * 2]);
      }
    }
    MPI_Waitall(int(req.size()), req.data(), MPI_STATUSES_IGNORE);
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
