// The Communicator front end: every collective goes through here, is recorded in the Ledger,
// and is forwarded to a backend (MPI on host memory, NCCL on device memory). Asynchronous calls
// return a handle; a per-rank communication thread runs the calls in issue order (a "comm
// stream"), so communication progresses while the caller computes. Strategies see only this.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/ledger.h"
#include "harness/common/dtype.h"
#include "harness/topology.h"

namespace sb {

// One collective as the backend sees it. All reductions are sums (bf16 summed in fp32 and
// rounded once per hop).
struct CollectiveOp {
  CollKind kind = CollKind::kBarrier;
  const Group* group = nullptr;
  const void* send = nullptr;  // all-reduce/broadcast: == recv (in place)
  void* recv = nullptr;
  size_t count = 0;            // see LedgerEntry::count
  DType dtype = DType::kF32;
  int root_index = 0;          // broadcast root, as an index into group->ranks
  uint64_t issue_mark = 0;     // what the backend's on_issue() returned for this op
};

// What a backend reports about one collective it ran.
struct BackendResult {
  HopBytes sent;         // bytes this rank sent, by hop class; meaningful only when counted
  bool counted = false;  // true: sent was summed from real transfers; false: use the ring model
  // >= 0: the backend timed the collective on its own stream (CUDA events), excluding the
  // wait for the compute stream; < 0: the Communicator's wall clock around run() is its time.
  double device_seconds = -1;
};

class CommBackend {
 public:
  virtual ~CommBackend() = default;
  virtual std::string name() const = 0;  // "mpi-ring", "mpi-native", "nccl"
  // Called on the issuing thread as the op is queued: a device backend marks there what the op
  // must wait for (the compute queued so far, which produced its inputs) and returns a token
  // that run() finds in op.issue_mark. Host backends need nothing: inputs are ready at issue.
  virtual uint64_t on_issue() { return 0; }
  // Runs op to completion on the calling (comm) thread.
  virtual BackendResult run(const CollectiveOp& op) = 0;
};

// One stretch the issuing thread spent blocked: in wait() on the op issued `seq`-th, or in
// synchronize() (seq == kAllOps). Steady-clock nanoseconds, as LedgerEntry::start_ns.
struct CommWait {
  static constexpr uint64_t kAllOps = ~uint64_t(0);
  uint64_t seq = kAllOps;
  int64_t begin_ns = 0, end_ns = 0;
};

class CommHandle {
 public:
  struct State;
  CommHandle() = default;
  explicit CommHandle(std::shared_ptr<State> s) : state_(std::move(s)) {}
  void wait();        // blocks until done; time blocked is added to the communicator's tally
  bool done() const;  // non-blocking test
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<State> state_;
};

class Communicator {
 public:
  Communicator(const Topology& topo, std::unique_ptr<CommBackend> backend, Ledger& ledger);
  ~Communicator();  // drains the queue and joins the comm thread
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const Topology& topology() const { return topo_; }
  const Group& group(GroupKind g) const { return topo_.group(g); }
  std::string backend_name() const;

  // In-place sum over the group.
  CommHandle all_reduce_async(void* buf, size_t count, DType t, GroupKind g,
                              std::string tag = {});
  // send holds recv_count * group size elements; rank i of the group receives the sum of
  // block i. Afterwards each rank holds the summed values of its own block.
  CommHandle reduce_scatter_async(const void* send, void* recv, size_t recv_count, DType t,
                                  GroupKind g, std::string tag = {});
  // recv holds send_count * group size elements, block i from group rank i.
  CommHandle all_gather_async(const void* send, void* recv, size_t send_count, DType t,
                              GroupKind g, std::string tag = {});
  CommHandle broadcast_async(void* buf, size_t count, DType t, int root_index, GroupKind g,
                             std::string tag = {});
  CommHandle barrier_async(GroupKind g);

  void all_reduce(void* buf, size_t count, DType t, GroupKind g, std::string tag = {}) {
    all_reduce_async(buf, count, t, g, std::move(tag)).wait();
  }
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType t, GroupKind g,
                      std::string tag = {}) {
    reduce_scatter_async(send, recv, recv_count, t, g, std::move(tag)).wait();
  }
  void all_gather(const void* send, void* recv, size_t send_count, DType t, GroupKind g,
                  std::string tag = {}) {
    all_gather_async(send, recv, send_count, t, g, std::move(tag)).wait();
  }
  void broadcast(void* buf, size_t count, DType t, int root_index, GroupKind g) {
    broadcast_async(buf, count, t, root_index, g).wait();
  }
  void barrier(GroupKind g) { barrier_async(g).wait(); }

  // Waits for every issued collective (end of step).
  void synchronize();
  // Seconds the caller spent blocked in wait()/synchronize() since the last reset: the
  // communication that was not hidden behind compute ("exposed communication").
  double blocked_seconds() const;
  void reset_blocked_seconds();
  // The trace's wait log: while on, every blocked stretch is kept until take_waits().
  void record_waits(bool on);
  std::vector<CommWait> take_waits();

  // The ledger is appended by the comm thread; read it only after synchronize().
  Ledger& ledger() { return ledger_; }

 private:
  struct Impl;
  CommHandle submit(const CollectiveOp& op, std::string tag);  // validate, queue, return handle
  const Topology& topo_;
  Ledger& ledger_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sb
