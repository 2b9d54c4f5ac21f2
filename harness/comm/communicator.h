// The Communicator front end: every collective goes through here, is recorded in the Ledger,
// and is forwarded to a backend (MPI on host memory, NCCL on device memory). Asynchronous calls
// return a handle; a per-rank communication thread runs the calls in issue order (a "comm
// stream"), so communication progresses while the caller computes; a second stream (own
// backend, own thread) runs what the real system issues on a stream of its own. A simulated
// backend (the predictor's) runs each call at issue instead, on its logical clock. Strategies
// see only this.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/ledger.h"
#include "harness/common/dtype.h"
#include "harness/topology.h"

namespace sb {

// Which implementation runs the collectives of a run: the suite's rings (bytes counted at each
// send) or the MPI library's own (bytes from the ring model).
enum class CollectiveImpl { kRing, kMpiNative };

// The comm streams of a rank. kMain runs every collective in issue order. kSide is a second
// stream with a backend of its own (its own MPI communicators: a separate process group, as
// PyTorch's inter-node group) and its own thread: an op issued there waits only for the ops
// issued before it on kSide and for the one handle it names as its input, not for kMain's queue
// (FSDP HYBRID_SHARD's inter-node all-reduce: torch main `_all_reduce_stream`). Without a side
// backend, kSide ops run on kMain in issue order.
enum class CommStream : uint8_t { kMain = 0, kSide = 1 };

// One collective as the backend sees it. All reductions are sums (bf16 summed in fp32 and
// rounded once per hop).
struct CollectiveOp {
  CollKind kind = CollKind::kBarrier;
  const Group* group = nullptr;
  const void* send = nullptr;  // all-reduce/broadcast: == recv (in place)
  void* recv = nullptr;
  size_t count = 0;            // see LedgerEntry::count
  DType dtype = DType::kF32;
  int root_index = 0;          // broadcast/reduce root, as an index into group->ranks
  uint64_t issue_mark = 0;     // what the backend's on_issue() returned for this op
  double ready_s = 0;          // simulated: logical time its input (another stream's op) is done
};

// What a backend reports about one collective it ran.
struct BackendResult {
  HopBytes sent;         // bytes this rank sent, by hop class; meaningful only when counted
  bool counted = false;  // true: sent was summed from real transfers; false: use the ring model
  // >= 0: the backend timed the collective on its own stream (CUDA events), excluding the
  // wait for the compute stream; < 0: the Communicator's wall clock around run() is its time.
  double device_seconds = -1;
  // >= 0: a simulated backend's logical completion time (runs_at_issue()).
  double end_s = -1;
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

  // A simulated backend (the predictor's) moves no data: it runs each op on the issuing thread
  // as it is issued, so the Communicator starts no comm thread, and completion is a logical
  // time (BackendResult::end_s) that wait(), done() and synchronize() ask the backend about.
  virtual bool runs_at_issue() const { return false; }
  // The caller's clock waits until end_s; returns the seconds it was blocked.
  virtual double wait_until(double end_s) { return 0; }
  // Whether an op completing at end_s is done by the caller's clock now.
  virtual bool done_by_now(double end_s) const { return true; }
  // The caller's clock waits until every issued op is done; returns the seconds blocked.
  virtual double wait_all() { return 0; }
  // The caller's logical clock now (seconds): where wait_until/wait_all left it. The wait log
  // and the ledger's start_ns/end_ns of a simulated run are on this clock.
  virtual double now_s() const { return 0; }
};

// One stretch the issuing thread spent blocked: in wait() on the op issued `seq`-th, or in
// synchronize() (seq == kAllOps). Steady-clock nanoseconds, as LedgerEntry::start_ns.
struct CommWait {
  static constexpr uint64_t kAllOps = ~uint64_t(0);
  uint64_t seq = kAllOps;
  int64_t begin_ns = 0, end_ns = 0;
};

class CommHandle {
  friend class Communicator;  // reads an input's state when an op on another stream names it

 public:
  struct State;
  CommHandle() = default;
  explicit CommHandle(std::shared_ptr<State> s) : state_(std::move(s)) {}
  void wait();        // blocks until done; time blocked is added to the communicator's tally
  // wait() for a caller that has done nothing since issuing this op (--overlap off): all the
  // time since the issue counts as blocked, also where the comm thread finished the op while
  // the caller was descheduled (on oversubscribed cores, wait() would find it done and count
  // nothing, and the communication would look hidden).
  void wait_from_issue();
  bool done() const;  // non-blocking test
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<State> state_;
};

class Communicator {
 public:
  // side: the backend of the kSide stream (nullptr: kSide ops run on kMain). It must be a
  // backend of the same kind as `backend`, on communicators of its own.
  Communicator(const Topology& topo, std::unique_ptr<CommBackend> backend, Ledger& ledger,
               std::unique_ptr<CommBackend> side = nullptr);
  ~Communicator();  // drains the queues and joins the comm threads
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const Topology& topology() const { return topo_; }
  const Group& group(GroupKind g) const { return topo_.group(g); }
  std::string backend_name() const;

  // In-place sum over the group. On CommStream::kSide it starts once `input` (an op on kMain
  // that writes buf) is done.
  CommHandle all_reduce_async(void* buf, size_t count, DType t, GroupKind g,
                              std::string tag = {}, CommStream stream = CommStream::kMain,
                              const CommHandle& input = {});
  // Whether kSide is a stream of its own here (false: it is kMain).
  bool has_side_stream() const;
  // send holds recv_count * group size elements; rank i of the group receives the sum of
  // block i. Afterwards each rank holds the summed values of its own block.
  CommHandle reduce_scatter_async(const void* send, void* recv, size_t recv_count, DType t,
                                  GroupKind g, std::string tag = {});
  // recv holds send_count * group size elements, block i from group rank i.
  CommHandle all_gather_async(const void* send, void* recv, size_t send_count, DType t,
                              GroupKind g, std::string tag = {});
  CommHandle broadcast_async(void* buf, size_t count, DType t, int root_index, GroupKind g,
                             std::string tag = {});
  // In-place sum to one rank: afterwards the root's buf holds the group's sum of buf; the
  // other ranks' buf is unchanged (DeepSpeed's dist.reduce to the owner of a gradient slice).
  CommHandle reduce_async(void* buf, size_t count, DType t, int root_index, GroupKind g,
                          std::string tag = {});
  // send and recv (not overlapping) hold block_count * group size elements each: block j of
  // send goes to group rank j, block j of recv comes from group rank j.
  CommHandle all_to_all_async(const void* send, void* recv, size_t block_count, DType t,
                              GroupKind g, std::string tag = {});
  CommHandle barrier_async(GroupKind g);

  void all_reduce(void* buf, size_t count, DType t, GroupKind g, std::string tag = {}) {
    all_reduce_async(buf, count, t, g, std::move(tag)).wait_from_issue();
  }
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType t, GroupKind g,
                      std::string tag = {}) {
    reduce_scatter_async(send, recv, recv_count, t, g, std::move(tag)).wait_from_issue();
  }
  void all_gather(const void* send, void* recv, size_t send_count, DType t, GroupKind g,
                  std::string tag = {}) {
    all_gather_async(send, recv, send_count, t, g, std::move(tag)).wait_from_issue();
  }
  void broadcast(void* buf, size_t count, DType t, int root_index, GroupKind g) {
    broadcast_async(buf, count, t, root_index, g).wait_from_issue();
  }
  void all_to_all(const void* send, void* recv, size_t block_count, DType t, GroupKind g,
                  std::string tag = {}) {
    all_to_all_async(send, recv, block_count, t, g, std::move(tag)).wait_from_issue();
  }
  void barrier(GroupKind g) { barrier_async(g).wait_from_issue(); }

  // Waits for every issued collective (end of step).
  void synchronize();
  // Seconds the caller spent blocked in wait()/synchronize() since the last reset: the
  // communication that was not hidden behind compute ("exposed communication").
  double blocked_seconds() const;
  void reset_blocked_seconds();
  // The trace's wait log: while on, every blocked stretch is kept until take_waits().
  void record_waits(bool on);
  std::vector<CommWait> take_waits();

  // The ledger is appended by the comm threads; read it only after synchronize(), which
  // leaves it in issue order (LedgerEntry::seq).
  Ledger& ledger() { return ledger_; }

 private:
  struct Impl;
  // validate, queue on `stream` (after `input` where given), return handle
  // A collective of `per_rank` elements per group rank: the ledger's count is per_rank times
  // the group size (reduce-scatter and all-to-all count their input, all-gather its output).
  CommHandle submit_per_rank(CollKind k, const void* send, void* recv, size_t per_rank, DType t,
                             GroupKind g, std::string tag);
  CommHandle submit(const CollectiveOp& op, std::string tag, CommStream stream = CommStream::kMain,
                    const CommHandle& input = {});
  // Runs op on the stream's backend and appends its ledger entry (comm thread, or the caller's
  // for a backend that runs at issue). seq: the op's issue order (LedgerEntry::seq).
  BackendResult run_and_record(const CollectiveOp& op, std::string tag, uint64_t seq,
                               int stream);
  void start_stream(int stream);  // the comm thread of one stream
  void sort_ledger_tail();        // entries since the last synchronize() into issue order
  const Topology& topo_;
  Ledger& ledger_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sb
