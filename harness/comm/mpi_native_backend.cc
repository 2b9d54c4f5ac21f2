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
      case CollKind::kReduce:
        for (size_t off = 0; off < op.count; off += max_elems_) {
          const int len = int(std::min(max_elems_, op.count - off));
          const bool root = g.index == op.root_index;
          // after this reduce the root holds the group's sum of these elements (others: unchanged)
          MPI_Reduce(root ? MPI_IN_PLACE : recv + off * es, root ? recv + off * es : nullptr, len,
                     type, sum_op(op.dtype), op.root_index, c);
        }
        break;
      case CollKind::kAllToAll:
        if (m <= max_elems_) {
          // after this all-to-all block j of recv holds group rank j's block for this rank
          MPI_Alltoall(send, int(m), type, recv, int(m), type, c);
          break;
        }
        for (size_t off = 0; off < m; off += max_elems_) {  // piece `off` of every block
          const size_t len = std::min(max_elems_, m - off);
          char* packed = static_cast<char*>(scratch(size_t(n) * len * es, 0));
          char* got = static_cast<char*>(scratch(size_t(n) * len * es, 1));
          for (int b = 0; b < n; ++b)
            std::memcpy(packed + size_t(b) * len * es, send + (size_t(b) * m + off) * es, len * es);
          // after this all-to-all `got` holds piece `off` of every rank's block for this rank
          MPI_Alltoall(packed, int(len), type, got, int(len), type, c);
          for (int b = 0; b < n; ++b)
            std::memcpy(recv + (size_t(b) * m + off) * es, got + size_t(b) * len * es, len * es);
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

std::unique_ptr<CommBackend> make_native_backend(const Topology& topo, size_t max_elems) {
  return std::make_unique<NativeBackend>(topo, max_elems);
}

}  // namespace sb::mpi_detail
