// The native MPI backend: MPI's own collectives (whatever algorithm the library picks) on the
// group's communicator; the bytes are left to the ring model (counted = false).
#include <algorithm>

#include "harness/comm/mpi_backend_base.h"

namespace sb::mpi_detail {
namespace {

// ---- native: MPI's own collectives; bytes left to the ring model ----------------------------
class NativeBackend final : public MpiBackendBase {
 public:
  using MpiBackendBase::MpiBackendBase;
  std::string name() const override { return "mpi-native"; }

  // Not counted (the ring model fills the ledger), timed by the Communicator's wall clock.
  BackendResult run(const CollectiveOp& op) override {
    const Group& g = *op.group;
    if (g.size() == 1) {
      local_copy(op);
      return {};
    }
    const Call c{op, g, dtype_bytes(op.dtype), op.count / size_t(g.size()), mpi_type(op.dtype),
                 comm(g), static_cast<char*>(op.recv), static_cast<const char*>(op.send)};
    switch (op.kind) {
      case CollKind::kAllReduce: all_reduce(c); break;
      case CollKind::kReduceScatter: reduce_scatter(c); break;
      case CollKind::kAllGather: all_gather(c); break;
      case CollKind::kBroadcast: broadcast(c); break;
      case CollKind::kReduce: reduce(c); break;
      case CollKind::kAllToAll: all_to_all(c); break;
      case CollKind::kBarrier:
        // after this barrier every rank of the group has reached it
        MPI_Barrier(c.comm);
        break;
    }
    return {};
  }

 private:
  // One collective's operands: es bytes per element, m elements per rank's block.
  struct Call {
    const CollectiveOp& op;
    const Group& g;
    size_t es, m;
    MPI_Datatype type;
    MPI_Comm comm;
    char* recv;
    const char* send;
  };

  void all_reduce(const Call& c) {
    for (size_t off = 0; off < c.op.count; off += max_elems_) {
      const int len = int(std::min(max_elems_, c.op.count - off));
      // after this all-reduce every rank holds the group's sum of these elements
      MPI_Allreduce(MPI_IN_PLACE, c.recv + off * c.es, len, c.type, sum_op(c.op.dtype), c.comm);
    }
  }

  // Copies piece [off, off+len) of each of the n blocks of m elements in `from` to `to`, packed
  // (pack) or back to the blocks (unpack).
  void pack(char* to, const char* from, const Call& c, size_t off, size_t len) {
    for (int b = 0; b < c.g.size(); ++b)
      std::memcpy(to + size_t(b) * len * c.es, from + (size_t(b) * c.m + off) * c.es, len * c.es);
  }
  void unpack(char* to, const char* from, const Call& c, size_t off, size_t len) {
    for (int b = 0; b < c.g.size(); ++b)
      std::memcpy(to + (size_t(b) * c.m + off) * c.es, from + size_t(b) * len * c.es, len * c.es);
  }

  void reduce_scatter(const Call& c) {
    const size_t n = size_t(c.g.size()), m = c.m, es = c.es;
    if (m <= max_elems_ && !overlaps(c.send, c.op.count * es, c.recv, m * es)) {
      // after this reduce-scatter rank i holds the group's sum of block i
      MPI_Reduce_scatter_block(c.send, c.recv, int(m), c.type, sum_op(c.op.dtype), c.comm);
      return;
    }
    for (size_t off = 0; off < m; off += max_elems_) {  // pack piece `off` of every block
      const size_t len = std::min(max_elems_, m - off);
      char* packed = static_cast<char*>(scratch(n * len * es, 0));
      pack(packed, c.send, c, off, len);
      // after this reduce-scatter rank i holds the sum of piece `off` of block i
      MPI_Reduce_scatter_block(packed, c.recv + off * es, int(len), c.type, sum_op(c.op.dtype),
                               c.comm);
    }
  }

  void all_gather(const Call& c) {
    const size_t n = size_t(c.g.size()), m = c.m, es = c.es;
    const bool in_place = c.send == c.recv + size_t(c.g.index) * m * es;
    if (m <= max_elems_ && (in_place || !overlaps(c.send, m * es, c.recv, c.op.count * es))) {
      // after this all-gather every rank holds every rank's block, in group order
      MPI_Allgather(in_place ? MPI_IN_PLACE : c.send, int(m), c.type, c.recv, int(m), c.type,
                    c.comm);
      return;
    }
    for (size_t off = 0; off < m; off += max_elems_) {  // gather piece `off`, then unpack
      const size_t len = std::min(max_elems_, m - off);
      char* mine = static_cast<char*>(scratch(len * es, 1));
      std::memcpy(mine, c.send + off * es, len * es);
      char* packed = static_cast<char*>(scratch(n * len * es, 0));
      // after this all-gather every rank holds piece `off` of every block
      MPI_Allgather(mine, int(len), c.type, packed, int(len), c.type, c.comm);
      unpack(c.recv, packed, c, off, len);
    }
  }

  void broadcast(const Call& c) {
    for (size_t off = 0; off < c.op.count; off += max_elems_) {
      const int len = int(std::min(max_elems_, c.op.count - off));
      // after this broadcast every rank holds the root's elements
      MPI_Bcast(c.recv + off * c.es, len, c.type, c.op.root_index, c.comm);
    }
  }

  void reduce(const Call& c) {
    const bool root = c.g.index == c.op.root_index;
    for (size_t off = 0; off < c.op.count; off += max_elems_) {
      const int len = int(std::min(max_elems_, c.op.count - off));
      char* mine = c.recv + off * c.es;
      // after this reduce the root holds the group's sum of these elements (others: unchanged)
      MPI_Reduce(root ? MPI_IN_PLACE : mine, root ? mine : nullptr, len, c.type,
                 sum_op(c.op.dtype), c.op.root_index, c.comm);
    }
  }

  void all_to_all(const Call& c) {
    const size_t n = size_t(c.g.size()), m = c.m, es = c.es;
    if (m <= max_elems_) {
      // after this all-to-all block j of recv holds group rank j's block for this rank
      MPI_Alltoall(c.send, int(m), c.type, c.recv, int(m), c.type, c.comm);
      return;
    }
    for (size_t off = 0; off < m; off += max_elems_) {  // piece `off` of every block
      const size_t len = std::min(max_elems_, m - off);
      char* packed = static_cast<char*>(scratch(n * len * es, 0));
      char* got = static_cast<char*>(scratch(n * len * es, 1));
      pack(packed, c.send, c, off, len);
      // after this all-to-all `got` holds piece `off` of every rank's block for this rank
      MPI_Alltoall(packed, int(len), c.type, got, int(len), c.type, c.comm);
      unpack(c.recv, got, c, off, len);
    }
  }
};

}  // namespace

std::unique_ptr<CommBackend> make_native_backend(const Topology& topo, size_t max_elems) {
  return std::make_unique<NativeBackend>(topo, max_elems);
}

}  // namespace sb::mpi_detail
