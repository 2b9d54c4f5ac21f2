// NcclBackend: one NCCL communicator per group kind (world from an MPI-broadcast unique id,
// intra/inter split from it), a dedicated communication stream on which each collective waits
// for the compute queued when it was issued (an event recorded by on_issue), and a blocking
// run() for the Communicator's comm thread that times the collective with events on the comm
// stream (not its wait for compute).
// It does not count bytes (NCCL's transfers are not visible): the ledger gets the ring model.
#include "harness/comm/cuda/nccl_backend.h"

#include <mpi.h>
#include <nccl.h>

#include <array>
#include <atomic>
#include <string>

#include "harness/comm/ledger.h"
#include "harness/common/check.h"
#include "harness/device/cuda/cuda_check.h"

#define SB_NCCL_CHECK(expr)                                                                 \
  do {                                                                                      \
    ncclResult_t sb_nccl_r_ = (expr);                                                       \
    if (sb_nccl_r_ != ncclSuccess) {                                                        \
      ::sb::fatal(__FILE__, __LINE__,                                                       \
                  std::string("NCCL error: ") + ncclGetErrorString(sb_nccl_r_) + " in " #expr); \
    }                                                                                       \
  } while (0)

namespace sb {
namespace {

ncclDataType_t nccl_type(DType t) {
  return t == DType::kF32 ? ncclFloat : t == DType::kBF16 ? ncclBfloat16 : ncclInt8;
}

class NcclBackend final : public CommBackend {
 public:
  NcclBackend(const Topology& topo, int device, cudaStream_t compute_stream)
      : topo_(topo), device_(device), compute_(compute_stream) {
    SB_CUDA_CHECK(cudaSetDevice(device_));
    ncclUniqueId id{};
    if (topo_.rank() == 0) SB_NCCL_CHECK(ncclGetUniqueId(&id));
    // After this broadcast every rank holds rank 0's id, so all join the same clique.
    int rc = MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    SB_CHECK(rc == MPI_SUCCESS, "MPI_Bcast of the NCCL unique id failed: " << rc);
    SB_NCCL_CHECK(ncclCommInitRank(&world_, topo_.world_size(), id, topo_.rank()));
    // Key = world rank, so a sub-communicator's rank equals the index in Group::ranks (which
    // Topology keeps ascending) and roots/blocks mean the same as on the MPI backends.
    SB_NCCL_CHECK(ncclCommSplit(world_, topo_.node(), topo_.rank(), &intra_, nullptr));
    SB_NCCL_CHECK(ncclCommSplit(world_, topo_.local_rank(), topo_.rank(), &inter_, nullptr));
    check_size(world_, topo_.world());
    check_size(intra_, topo_.intra());
    check_size(inter_, topo_.inter());
    // MiCS's groups (topology.h): my partition, its replicas, my partition's ranks on other nodes
    const int P = topo_.partition_size(), part = topo_.rank() / P;
    SB_NCCL_CHECK(ncclCommSplit(world_, part, topo_.rank(), &partition_, nullptr));
    SB_NCCL_CHECK(ncclCommSplit(world_, topo_.rank() % P, topo_.rank(), &replica_, nullptr));
    SB_NCCL_CHECK(ncclCommSplit(world_, part * topo_.ranks_per_node() + topo_.local_rank(),
                                topo_.rank(), &partition_inter_, nullptr));
    check_size(partition_, topo_.group(GroupKind::kPartition));
    check_size(replica_, topo_.group(GroupKind::kReplica));
    check_size(partition_inter_, topo_.group(GroupKind::kPartitionInter));
    // Non-blocking: must not serialise with the legacy default stream.
    SB_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
    for (cudaEvent_t& e : issued_)
      SB_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    SB_CUDA_CHECK(cudaEventCreate(&coll_start_));  // default flags: timing enabled
    SB_CUDA_CHECK(cudaEventCreate(&coll_end_));
    SB_CUDA_CHECK(cudaMalloc(&barrier_buf_, sizeof(float)));
    SB_CUDA_CHECK(cudaMemset(barrier_buf_, 0, sizeof(float)));
    SB_CUDA_CHECK(cudaDeviceSynchronize());
  }

  ~NcclBackend() override {
    // No checks: may run during teardown after an error elsewhere.
    cudaSetDevice(device_);
    cudaStreamSynchronize(comm_);
    ncclCommDestroy(partition_inter_);
    ncclCommDestroy(replica_);
    ncclCommDestroy(partition_);
    ncclCommDestroy(inter_);
    ncclCommDestroy(intra_);
    ncclCommDestroy(world_);
    cudaFree(barrier_buf_);
    cudaEventDestroy(coll_end_);
    cudaEventDestroy(coll_start_);
    for (cudaEvent_t e : issued_) cudaEventDestroy(e);
    cudaStreamDestroy(comm_);
  }

  std::string name() const override { return "nccl"; }

  // On the issuing (main) thread: mark the compute queued so far, which produced this op's
  // inputs. Marking later, on the comm thread, would also wait for compute the main thread
  // queued since (the next layer's backward), delaying the collective and hiding less of it.
  // A slot is recorded again kIssueSlots ops later; if its op has not started by then it waits
  // for the newer mark: later compute, so still correct, only less overlapped.
  uint64_t on_issue() override {
    const uint64_t mark = next_mark_.fetch_add(1);
    SB_CUDA_CHECK(cudaEventRecord(issued_[mark % kIssueSlots], compute_));
    return mark;
  }

  BackendResult run(const CollectiveOp& op) override {
    SB_CHECK(op.group != nullptr, "collective without a group");
    // The comm thread is not the thread that selected the device; CUDA's device is per thread.
    SB_CUDA_CHECK(cudaSetDevice(device_));
    ncclComm_t comm = comm_for(op.group->kind);
    const int n = op.group->size();
    const ncclDataType_t t = nccl_type(op.dtype);
    // Order after the compute that was queued when the op was issued (on_issue).
    SB_CUDA_CHECK(cudaStreamWaitEvent(comm_, issued_[op.issue_mark % kIssueSlots], 0));
    // Timed on the comm stream from after its wait for compute: that wait (possibly for compute
    // later than this op's inputs) is not communication time, but the wall clock around run()
    // would include it. The interval still includes waiting for peer ranks inside NCCL, as
    // nccl-tests' timing does.
    SB_CUDA_CHECK(cudaEventRecord(coll_start_, comm_));
    switch (op.kind) {
      case CollKind::kAllReduce:
        // After this all-reduce every rank of the group holds the element-wise sum.
        SB_NCCL_CHECK(ncclAllReduce(op.send, op.recv, op.count, t, ncclSum, comm, comm_));
        break;
      case CollKind::kReduceScatter:
        SB_CHECK(op.count % size_t(n) == 0,
                 "reduce-scatter of " << op.count << " elements over " << n << " ranks");
        // After this reduce-scatter each rank holds the summed values of its own block.
        SB_NCCL_CHECK(
            ncclReduceScatter(op.send, op.recv, op.count / n, t, ncclSum, comm, comm_));
        break;
      case CollKind::kAllGather:
        SB_CHECK(op.count % size_t(n) == 0,
                 "all-gather of " << op.count << " elements over " << n << " ranks");
        // After this all-gather every rank holds all blocks, block i from group rank i.
        SB_NCCL_CHECK(ncclAllGather(op.send, op.recv, op.count / n, t, comm, comm_));
        break;
      case CollKind::kBroadcast:
        // After this broadcast every rank holds the root's buffer.
        SB_NCCL_CHECK(
            ncclBroadcast(op.send, op.recv, op.count, t, op.root_index, comm, comm_));
        break;
      case CollKind::kReduce:
        // After this reduce the root holds the group's element-wise sum (in place).
        SB_NCCL_CHECK(
            ncclReduce(op.send, op.recv, op.count, t, ncclSum, op.root_index, comm, comm_));
        break;
      case CollKind::kAllToAll: {
        SB_CHECK(op.count % size_t(n) == 0,
                 "all-to-all of " << op.count << " elements over " << n << " ranks");
        // NCCL has no all-to-all: one grouped send and receive per peer is one collective
        // (nccl-tests alltoall.cu does the same). After it block j of recv is rank j's block.
        const size_t m = op.count / size_t(n), bytes = m * dtype_bytes(op.dtype);
        const auto* send = static_cast<const char*>(op.send);
        auto* recv = static_cast<char*>(op.recv);
        SB_NCCL_CHECK(ncclGroupStart());
        for (int peer = 0; peer < n; ++peer) {
          SB_NCCL_CHECK(ncclSend(send + size_t(peer) * bytes, m, t, peer, comm, comm_));
          SB_NCCL_CHECK(ncclRecv(recv + size_t(peer) * bytes, m, t, peer, comm, comm_));
        }
        SB_NCCL_CHECK(ncclGroupEnd());
        break;
      }
      case CollKind::kBarrier:
        // NCCL has no barrier: a one-element all-reduce completes only once every rank of
        // the group has reached it.
        SB_NCCL_CHECK(
            ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat, ncclSum, comm, comm_));
        break;
    }
    SB_CUDA_CHECK(cudaEventRecord(coll_end_, comm_));
    // After this the collective is complete on this rank (coll_end_ is the comm stream's last
    // work), so run() stays blocking.
    SB_CUDA_CHECK(cudaEventSynchronize(coll_end_));
    float ms = 0;
    SB_CUDA_CHECK(cudaEventElapsedTime(&ms, coll_start_, coll_end_));
    BackendResult res;
    res.sent = ring_model_sent(op.kind, op.count, op.dtype, *op.group, topo_, op.root_index);
    res.counted = false;
    res.device_seconds = double(ms) * 1e-3;
    return res;
  }

 private:
  ncclComm_t comm_for(GroupKind g) const {
    switch (g) {
      case GroupKind::kIntra: return intra_;
      case GroupKind::kInter: return inter_;
      case GroupKind::kPartition: return partition_;
      case GroupKind::kReplica: return replica_;
      case GroupKind::kPartitionInter: return partition_inter_;
      case GroupKind::kWorld: break;
    }
    return world_;
  }
  static void check_size(ncclComm_t comm, const Group& g) {
    int count = 0, rank = 0;
    SB_NCCL_CHECK(ncclCommCount(comm, &count));
    SB_NCCL_CHECK(ncclCommUserRank(comm, &rank));
    SB_CHECK(count == g.size() && rank == g.index,
             group_name(g.kind) << " communicator has " << count << " ranks (me " << rank
                                << "), topology says " << g.size() << " (me " << g.index
                                << ")");
  }

  Topology topo_;  // a copy: ring_model_sent needs the node map for the life of the backend
  int device_;
  cudaStream_t compute_;
  cudaStream_t comm_ = nullptr;
  static constexpr size_t kIssueSlots = 256;
  std::array<cudaEvent_t, kIssueSlots> issued_{};  // compute marks, one per op in flight
  std::atomic<uint64_t> next_mark_{0};
  cudaEvent_t coll_start_ = nullptr, coll_end_ = nullptr;  // timing: the collective alone
  ncclComm_t world_ = nullptr, intra_ = nullptr, inter_ = nullptr;
  ncclComm_t partition_ = nullptr, replica_ = nullptr, partition_inter_ = nullptr;
  float* barrier_buf_ = nullptr;
};

}  // namespace

std::unique_ptr<CommBackend> make_nccl_backend(const Topology& topo, int local_rank,
                                               cudaStream_t compute_stream) {
  int count = 0;
  SB_CUDA_CHECK(cudaGetDeviceCount(&count));
  SB_CHECK(count > 0, "NCCL backend without a visible GPU");
  // The same device make_cuda_device picked for this local rank.
  return std::make_unique<NcclBackend>(topo, local_rank % count, compute_stream);
}

std::string nccl_version_string() {
  int v = 0;
  ncclGetVersion(&v);
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

}  // namespace sb
