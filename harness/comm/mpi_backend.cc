// The MPI backends on host memory. kRing: every collective is a ring of MPI_Sendrecv over the
// group's communicator, and each transfer is counted by hop class at the one send site (the
// *measurement* that the ring model in ledger.cc must equal). kMpiNative: MPI's own collectives
// (whatever algorithm the library picks), left to the ring model (counted = false).
// Neither touches the Ledger nor the memory tracker: scratch here is backend-private.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "harness/comm/mpi_runtime.h"
#include "harness/common/check.h"

namespace sb {
namespace {

MPI_Datatype mpi_type(DType t) { return t == DType::kF32 ? MPI_FLOAT : MPI_UINT16_T; }
int wrap(int i, int n) { return ((i % n) + n) % n; }

// dst[k] = a[k] + b[k]; bf16 adds in fp32 and rounds once. dst may alias a or b.
void sum_to(void* dst, const void* a, const void* b, size_t n, DType t) {
  if (t == DType::kF32) {
    auto* d = static_cast<float*>(dst);
    auto *x = static_cast<const float*>(a), *y = static_cast<const float*>(b);
    for (size_t k = 0; k < n; ++k) d[k] = x[k] + y[k];
  } else {
    auto* d = static_cast<uint16_t*>(dst);
    auto *x = static_cast<const uint16_t*>(a), *y = static_cast<const uint16_t*>(b);
    for (size_t k = 0; k < n; ++k) d[k] = f32_to_bf16(bf16_to_f32(x[k]) + bf16_to_f32(y[k]));
  }
}

// MPI user op for bf16 (uint16 storage): inout = in + inout, summed in fp32, rounded once.
void bf16_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
  sum_to(inout, in, inout, size_t(*len), DType::kBF16);
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

// One MPI communicator per GroupKind, split collectively at construction (main thread); the
// rank order of each equals the Group's (ascending world rank), so comm rank == group index.
class MpiBackendBase : public CommBackend {
 public:
  MpiBackendBase(const Topology& topo, size_t max_elems) : topo_(topo), max_elems_(max_elems) {
    SB_CHECK(max_elems_ >= 1 && max_elems_ <= size_t(INT_MAX), "bad max elements per call");
    int world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    SB_CHECK(world == topo.world_size(),
             "topology for " << topo.world_size() << " ranks, MPI world of " << world);
    // after these splits each group has a private communicator in ring order
    MPI_Comm_dup(MPI_COMM_WORLD, &comms_[int(GroupKind::kWorld)]);
    MPI_Comm_split(MPI_COMM_WORLD, topo.node(), topo.rank(), &comms_[int(GroupKind::kIntra)]);
    MPI_Comm_split(MPI_COMM_WORLD, topo.local_rank(), topo.rank(), &comms_[int(GroupKind::kInter)]);
    for (GroupKind g : {GroupKind::kWorld, GroupKind::kIntra, GroupKind::kInter}) {
      int size = 0, rank = 0;
      MPI_Comm_size(comms_[int(g)], &size);
      MPI_Comm_rank(comms_[int(g)], &rank);
      SB_CHECK(size == topo.group(g).size() && rank == topo.group(g).index,
               group_name(g) << " communicator does not match the topology");
    }
    MPI_Op_create(&bf16_sum_op, /*commute=*/1, &bf16_sum_);
  }
  ~MpiBackendBase() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;  // MPI already down: nothing left to free
    for (MPI_Comm& c : comms_) MPI_Comm_free(&c);
    MPI_Op_free(&bf16_sum_);
  }

 protected:
  MPI_Comm comm(const Group& g) const { return comms_[int(g.kind)]; }
  MPI_Op sum_op(DType t) const { return t == DType::kF32 ? MPI_SUM : bf16_sum_; }
  void* scratch(size_t bytes, int which) {
    auto& v = scratch_[which];
    if (v.size() < bytes) v.resize(bytes);
    return v.data();
  }
  // A group of one: the result is the input; nothing moves.
  static void local_copy(const CollectiveOp& op) {
    const size_t bytes = op.count * dtype_bytes(op.dtype);
    if (op.kind != CollKind::kBarrier && op.send != op.recv && bytes > 0)
      std::memmove(op.recv, op.send, bytes);
  }

  Topology topo_;
  size_t max_elems_;  // elements per MPI call (INT_MAX; smaller in tests of the split path)
  MPI_Comm comms_[3] = {MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL};
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  std::vector<unsigned char> scratch_[2];
};

// ---- ring: Sendrecv to the next position, from the previous one ----------------------------
class RingBackend final : public MpiBackendBase {
 public:
  using MpiBackendBase::MpiBackendBase;
  std::string name() const override { return "mpi-ring"; }

  HopBytes run(const CollectiveOp& op, bool* counted) override {
    sent_ = HopBytes{};
    op_ = &op;
    es_ = dtype_bytes(op.dtype);
    *counted = op.kind != CollKind::kBarrier;
    const int n = op.group->size();
    if (n == 1) {
      local_copy(op);
      return sent_;
    }
    switch (op.kind) {
      case CollKind::kAllReduce: all_reduce(); break;
      case CollKind::kReduceScatter: reduce_scatter(); break;
      case CollKind::kAllGather: all_gather(); break;
      case CollKind::kBroadcast: broadcast(); break;
      case CollKind::kBarrier:
        // after this barrier every rank of the group has reached it (no payload: not counted)
        MPI_Barrier(comm(*op.group));
        break;
    }
    return sent_;
  }

 private:
  static constexpr size_t kPipelineBytes = size_t(1) << 19;  // broadcast chain piece

  char* at(void* base, size_t elem) const { return static_cast<char*>(base) + elem * es_; }
  const char* at(const void* base, size_t elem) const {
    return static_cast<const char*>(base) + elem * es_;
  }
  Chunk chunk(int c) const {
    return ring_chunk(op_->count, op_->group->size(), wrap(c, op_->group->size()));
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

  void all_reduce() {
    const int n = op_->group->size(), i = op_->group->index;
    const int next = wrap(i + 1, n), prev = wrap(i - 1, n);
    void* buf = op_->recv;
    void* tmp = scratch(chunk(0).len * es_, 0);
    for (int s = 0; s < n - 1; ++s) {  // the reduce-scatter schedule over ring_chunk(count, n, .)
      const Chunk sc = chunk(i - 1 - s), rc = chunk(i - 2 - s);
      xfer(at(buf, sc.begin), sc.len, next, tmp, rc.len, prev);
      sum_to(at(buf, rc.begin), at(buf, rc.begin), tmp, rc.len, op_->dtype);
    }
    // here position i holds the full sum of chunk i; the all-gather below hands it round
    for (int s = 0; s < n - 1; ++s) {
      const Chunk sc = chunk(i - s), rc = chunk(i - 1 - s);
      xfer(at(buf, sc.begin), sc.len, next, at(buf, rc.begin), rc.len, prev);
    }
  }

  // Position i, step s: send the partial sum of chunk i-1-s, receive chunk i-2-s and add own;
  // after n-1 steps position i holds the sum of chunk i. recv may alias block i of send (read
  // only at the last step, element by element, as it is written).
  void reduce_scatter() {
    const int n = op_->group->size(), i = op_->group->index;
    const int next = wrap(i + 1, n), prev = wrap(i - 1, n);
    const size_t m = op_->count / size_t(n);
    void* acc = scratch(m * es_, 0);
    void* tmp = scratch(m * es_, 1);
    for (int s = 0; s < n - 1; ++s) {
      const Chunk sc = chunk(i - 1 - s), rc = chunk(i - 2 - s);
      xfer(s == 0 ? at(op_->send, sc.begin) : acc, m, next, tmp, m, prev);
      sum_to(s == n - 2 ? op_->recv : acc, tmp, at(op_->send, rc.begin), m, op_->dtype);
    }
  }

  void all_gather() {
    const int n = op_->group->size(), i = op_->group->index;
    const int next = wrap(i + 1, n), prev = wrap(i - 1, n);
    void* recv = op_->recv;
    const Chunk own = chunk(i);
    if (op_->send != at(recv, own.begin))
      std::memmove(at(recv, own.begin), op_->send, own.len * es_);
    for (int s = 0; s < n - 1; ++s) {
      const Chunk sc = chunk(i - s), rc = chunk(i - 1 - s);
      xfer(at(recv, sc.begin), sc.len, next, at(recv, rc.begin), rc.len, prev);
    }
  }

  // A chain from the root along the ring, pipelined: piece k moves on while k+1 arrives.
  void broadcast() {
    const int n = op_->group->size(), i = op_->group->index;
    const int p = wrap(i - op_->root_index, n);  // my place in the chain
    const int next = p < n - 1 ? wrap(i + 1, n) : -1, prev = p > 0 ? wrap(i - 1, n) : -1;
    const size_t piece = std::min(max_elems_, std::max<size_t>(1, kPipelineBytes / es_));
    const size_t pieces = (op_->count + piece - 1) / piece;
    void* buf = op_->recv;
    auto len = [&](size_t k) { return std::min(piece, op_->count - k * piece); };
    for (size_t t = 0; t <= pieces; ++t) {
      const bool send = (p == 0 ? t < pieces : t >= 1), recv = p > 0 && t < pieces;
      const size_t sk = p == 0 ? t : t - 1;
      xfer(send ? at(buf, sk * piece) : nullptr, send ? len(sk) : 0, next,
           recv ? at(buf, t * piece) : nullptr, recv ? len(t) : 0, prev);
    }
  }

  const CollectiveOp* op_ = nullptr;
  size_t es_ = 4;
  HopBytes sent_;
};

// ---- native: MPI's own collectives; bytes left to the ring model ----------------------------
class NativeBackend final : public MpiBackendBase {
 public:
  using MpiBackendBase::MpiBackendBase;
  std::string name() const override { return "mpi-native"; }

  HopBytes run(const CollectiveOp& op, bool* counted) override {
    *counted = false;
    const Group& g = *op.group;
    const int n = g.size();
    if (n == 1) {
      local_copy(op);
      return {};
    }
    const size_t es = dtype_bytes(op.dtype), m = op.count / size_t(n);
    const MPI_Datatype type = mpi_type(op.dtype);
    const MPI_Comm c = comm(g);
    auto* recv = static_cast<char*>(op.recv);
    auto* send = static_cast<const char*>(op.send);
    switch (op.kind) {
      case CollKind::kAllReduce:
        for (size_t off = 0; off < op.count; off += max_elems_) {
          const int len = int(std::min(max_elems_, op.count - off));
          // after this all-reduce every rank holds the group's sum of these elements
          MPI_Allreduce(MPI_IN_PLACE, recv + off * es, len, type, sum_op(op.dtype), c);
        }
        break;
      case CollKind::kReduceScatter:
        if (m <= max_elems_ && !overlaps(send, op.count * es, recv, m * es)) {
          // after this reduce-scatter rank i holds the group's sum of block i
          MPI_Reduce_scatter_block(send, recv, int(m), type, sum_op(op.dtype), c);
          break;
        }
        for (size_t off = 0; off < m; off += max_elems_) {  // pack piece `off` of every block
          const size_t len = std::min(max_elems_, m - off);
          char* packed = static_cast<char*>(scratch(size_t(n) * len * es, 0));
          for (int b = 0; b < n; ++b)
            std::memcpy(packed + size_t(b) * len * es, send + (size_t(b) * m + off) * es, len * es);
          // after this reduce-scatter rank i holds the sum of piece `off` of block i
          MPI_Reduce_scatter_block(packed, recv + off * es, int(len), type, sum_op(op.dtype), c);
        }
        break;
      case CollKind::kAllGather: {
        const bool in_place = send == recv + size_t(g.index) * m * es;
        if (m <= max_elems_ && (in_place || !overlaps(send, m * es, recv, op.count * es))) {
          // after this all-gather every rank holds every rank's block, in group order
          MPI_Allgather(in_place ? MPI_IN_PLACE : send, int(m), type, recv, int(m), type, c);
          break;
        }
        for (size_t off = 0; off < m; off += max_elems_) {  // gather piece `off`, then unpack
          const size_t len = std::min(max_elems_, m - off);
          char* mine = static_cast<char*>(scratch(len * es, 1));
          std::memcpy(mine, send + off * es, len * es);
          char* packed = static_cast<char*>(scratch(size_t(n) * len * es, 0));
          // after this all-gather every rank holds piece `off` of every block
          MPI_Allgather(mine, int(len), type, packed, int(len), type, c);
          for (int b = 0; b < n; ++b)
            std::memcpy(recv + (size_t(b) * m + off) * es, packed + size_t(b) * len * es, len * es);
        }
        break;
      }
      case CollKind::kBroadcast:
        for (size_t off = 0; off < op.count; off += max_elems_) {
          const int len = int(std::min(max_elems_, op.count - off));
          // after this broadcast every rank holds the root's elements
          MPI_Bcast(recv + off * es, len, type, op.root_index, c);
        }
        break;
      case CollKind::kBarrier:
        // after this barrier every rank of the group has reached it
        MPI_Barrier(c);
        break;
    }
    return {};
  }
};

}  // namespace

std::unique_ptr<CommBackend> make_mpi_backend(const Topology& topo, CollectiveImpl impl,
                                              size_t max_elems_per_call) {
  if (impl == CollectiveImpl::kRing) return std::make_unique<RingBackend>(topo, max_elems_per_call);
  return std::make_unique<NativeBackend>(topo, max_elems_per_call);
}

std::unique_ptr<CommBackend> make_mpi_backend(const Topology& topo, CollectiveImpl impl) {
  return make_mpi_backend(topo, impl, size_t(INT_MAX));
}

}  // namespace sb
