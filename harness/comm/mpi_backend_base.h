// Shared by the two MPI backends (mpi_ring_backend.cc, mpi_native_backend.cc): the per-group
// MPI communicators, the bf16 sum, scratch, and the group-of-one shortcut. Only the MPI
// backends include this header (it includes mpi.h); everything else sees mpi_runtime.h.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/common/check.h"

namespace sb::mpi_detail {

inline MPI_Datatype mpi_type(DType t) {
  return t == DType::kF32 ? MPI_FLOAT : t == DType::kBF16 ? MPI_UINT16_T : MPI_INT8_T;
}
inline int wrap(int i, int n) { return ((i % n) + n) % n; }

// dst[k] = a[k] + b[k]; bf16 adds in fp32 and rounds once. dst may alias a or b.
void sum_to(void* dst, const void* a, const void* b, size_t n, DType t);
// MPI user op for bf16 (uint16 storage): inout = in + inout, summed in fp32, rounded once.
void bf16_sum_op(void* in, void* inout, int* len, MPI_Datatype*);

inline bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

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
    const int P = topo.partition_size(), part = topo.rank() / P;
    MPI_Comm_split(MPI_COMM_WORLD, part, topo.rank(), &comms_[int(GroupKind::kPartition)]);
    MPI_Comm_split(MPI_COMM_WORLD, topo.rank() % P, topo.rank(), &comms_[int(GroupKind::kReplica)]);
    MPI_Comm_split(MPI_COMM_WORLD, part * topo.ranks_per_node() + topo.local_rank(), topo.rank(),
                   &comms_[int(GroupKind::kPartitionInter)]);
    for (int k = 0; k < kNumGroupKinds; ++k) {
      const GroupKind g = GroupKind(k);
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
  MPI_Comm comms_[kNumGroupKinds] = {MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL,
                                     MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL};
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  std::vector<unsigned char> scratch_[2];
};


std::unique_ptr<CommBackend> make_ring_backend(const Topology& topo, size_t max_elems);
std::unique_ptr<CommBackend> make_native_backend(const Topology& topo, size_t max_elems);

}  // namespace sb::mpi_detail
