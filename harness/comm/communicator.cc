// The Communicator front end: validates each call on the caller's thread, queues it on its comm
// stream, whose thread runs the ops in FIFO issue order and appends one Ledger entry per op.
// kMain has one thread; kSide (when given a backend) another, with communicators of its own.
// Threading: while a Communicator lives, every MPI call of the run happens on its comm threads,
// each on its own communicators, so two threads may be in MPI at once (MPI_THREAD_MULTIPLE);
// the ledger is appended under a lock and read by others only after synchronize(). It does not
// move bytes itself: that is the backend's job.
#include "harness/comm/communicator.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <iterator>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "harness/comm/watchdog.h"
#include "harness/common/check.h"

namespace sb {
namespace {
using Clock = std::chrono::steady_clock;
int64_t ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

// Time the issuing thread spent blocked: the exposed-time tally, and the wait log (trace only).
struct BlockedTally {
  std::atomic<int64_t> ns{0};
  std::atomic<bool> log_on{false};
  std::mutex m;
  std::vector<CommWait> log;
  void add(uint64_t seq, Clock::time_point t0) { add(seq, ns_of(t0), ns_of(Clock::now())); }
  void add(uint64_t seq, int64_t begin_ns, int64_t end_ns) {
    ns.fetch_add(end_ns - begin_ns);
    if (!log_on.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> lock(m);
    log.push_back(CommWait{seq, begin_ns, end_ns});
  }
  // A simulated backend's wait: `blocked` logical seconds ending at the caller's clock now.
  void add_simulated(uint64_t seq, double blocked_s, double now_s) {
    add(seq, int64_t(std::llround((now_s - blocked_s) * 1e9)), int64_t(std::llround(now_s * 1e9)));
  }
};

struct CommHandle::State {
  std::mutex m;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  uint64_t seq = 0;                     // issue order on the communicator
  Clock::time_point issued_at;          // when submit() queued it
  std::shared_ptr<BlockedTally> tally;  // the communicator's
  CommBackend* simulated = nullptr;  // set when the backend runs at issue: its logical clock
  double end_s = 0;                  // and the op's logical completion time on it
};

void CommHandle::wait() {
  if (state_ && state_->simulated) {
    const double blocked = state_->simulated->wait_until(state_->end_s);
    state_->tally->add_simulated(state_->seq, blocked, state_->simulated->now_s());
    return;
  }
  if (!state_ || state_->done.load(std::memory_order_acquire)) return;
  const auto t0 = Clock::now();
  {
    std::unique_lock<std::mutex> lock(state_->m);
    state_->cv.wait(lock, [&] { return state_->done.load(std::memory_order_acquire); });
  }
  state_->tally->add(state_->seq, t0);
}

void CommHandle::wait_from_issue() {
  if (!state_ || state_->simulated) return wait();  // the logical clock has not moved since
  {
    std::unique_lock<std::mutex> lock(state_->m);
    state_->cv.wait(lock, [&] { return state_->done.load(std::memory_order_acquire); });
  }
  state_->tally->add(state_->seq, state_->issued_at);
}

bool CommHandle::done() const {
  if (state_ && state_->simulated) return state_->simulated->done_by_now(state_->end_s);
  return !state_ || state_->done.load(std::memory_order_acquire);
}

struct Communicator::Impl {
  struct Task {
    CollectiveOp op;
    std::string tag;
    std::shared_ptr<CommHandle::State> state;
    std::shared_ptr<CommHandle::State> input;  // another stream's op this one waits for
  };
  struct Stream {
    std::unique_ptr<CommBackend> backend;
    std::condition_variable cv_work;
    std::deque<Task> queue;
    std::thread thread;
  };
  Stream streams[2];
  int num_streams = 1;  // 2 with a side backend
  std::shared_ptr<BlockedTally> tally = std::make_shared<BlockedTally>();
  std::mutex m;  // queues, counters, stop
  std::condition_variable cv_idle;
  uint64_t issued = 0, completed = 0;
  bool stop = false;
  std::mutex ledger_m;        // the comm threads append in completion order
  uint64_t synced_seq = 0;    // ops issued before the last synchronize(): in order already
  CommBackend& backend() { return *streams[0].backend; }
};

namespace {
void wait_done(CommHandle::State& s) {
  std::unique_lock<std::mutex> lock(s.m);
  s.cv.wait(lock, [&] { return s.done.load(std::memory_order_acquire); });
}
}  // namespace

Communicator::Communicator(const Topology& topo, std::unique_ptr<CommBackend> backend,
                           Ledger& ledger, std::unique_ptr<CommBackend> side)
    : topo_(topo), ledger_(ledger), impl_(std::make_unique<Impl>()) {
  SB_CHECK(backend != nullptr, "a Communicator needs a backend");
  SB_CHECK(side == nullptr || side->runs_at_issue() == backend->runs_at_issue(),
           "the side stream's backend must be of the main one's kind");
  impl_->streams[0].backend = std::move(backend);
  if (side) impl_->streams[1].backend = std::move(side), impl_->num_streams = 2;
  if (impl_->backend().runs_at_issue()) return;  // a simulation: ops run in submit()
  for (int s = 0; s < impl_->num_streams; ++s) start_stream(s);
}

void Communicator::start_stream(int stream) {
  Impl* impl = impl_.get();
  Impl::Stream& st = impl->streams[stream];
  st.thread = std::thread([this, impl, &st, stream] {
    for (;;) {
      Impl::Task task;
      {
        std::unique_lock<std::mutex> lock(impl->m);
        st.cv_work.wait(lock, [&] { return impl->stop || !st.queue.empty(); });
        if (st.queue.empty()) return;  // stop requested and drained
        task = std::move(st.queue.front());
        st.queue.pop_front();
      }
      // the input runs on the other stream, under its own watchdog scope
      if (task.input) wait_done(*task.input);
      run_and_record(task.op, std::move(task.tag), task.state->seq, stream);
      {
        std::lock_guard<std::mutex> lock(task.state->m);
        task.state->done.store(true, std::memory_order_release);
      }
      task.state->cv.notify_all();
      {
        std::lock_guard<std::mutex> lock(impl->m);
        ++impl->completed;
      }
      impl->cv_idle.notify_all();
    }
  });
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(impl_->m);
    impl_->stop = true;
  }
  for (Impl::Stream& st : impl_->streams) {
    st.cv_work.notify_all();
    if (st.thread.joinable()) st.thread.join();
  }
}

bool Communicator::has_side_stream() const { return impl_->num_streams == 2; }

std::string Communicator::backend_name() const { return impl_->backend().name(); }

// Whom a stuck collective waits on, for the watchdog's message: the ring's predecessor, or
// for the pairwise all-to-all every other rank of the group (any one of them may be missing).
static std::string awaited_peers(const CollectiveOp& op) {
  const Group& g = *op.group;
  if (op.kind != CollKind::kAllToAll)
    return "ring predecessor rank " + std::to_string(g.ranks[(g.index + g.size() - 1) % g.size()]);
  std::string peers;
  for (int j = 0; j < g.size(); ++j)
    if (j != g.index) {
      if (!peers.empty()) peers += ',';  // in place: GCC 12 warns (-Wrestrict) on "" + temp
      peers += std::to_string(g.ranks[j]);
    }
  return "its all-to-all peers (ranks " + peers + ")";
}

BackendResult Communicator::run_and_record(const CollectiveOp& op, std::string tag, uint64_t seq,
                                           int stream) {
  CommBackend& backend = *impl_->streams[stream].backend;
  const auto t0 = Clock::now();
  BackendResult res;
  if (backend.runs_at_issue()) {
    res = backend.run(op);  // nothing to wait on: no watchdog
  } else {
    const Group& g = *op.group;
    Watchdog::Scope watch(std::string(coll_name(op.kind)) + " over " + group_name(g.kind) + " (" +
                          std::to_string(g.size()) + " ranks, " + std::to_string(op.count) +
                          " x " + dtype_name(op.dtype) + (tag.empty() ? "" : ", " + tag) +
                          ") waiting on " + awaited_peers(op) +
                          (stream ? " (side comm stream)" : ""));
    res = backend.run(op);
  }
  const auto t1 = Clock::now();
  const double wall_s = std::chrono::duration<double>(t1 - t0).count();
  LedgerEntry e;
  e.seq = seq;
  if (res.end_s >= 0) {  // simulated: the op's interval on the logical comm stream
    e.start_ns = std::llround((res.end_s - res.device_seconds) * 1e9);
    e.end_ns = std::llround(res.end_s * 1e9);
  } else {
    e.start_ns = ns_of(t0);
    e.end_ns = ns_of(t1);
  }
  e.kind = op.kind;
  e.group = op.group->kind;
  e.group_size = op.group->size();
  e.count = op.count;
  e.dtype = op.dtype;
  e.root_index = op.root_index;
  e.payload_bytes = uint64_t(op.count) * dtype_bytes(op.dtype);
  e.sent = res.counted
               ? res.sent
               : ring_model_sent(op.kind, op.count, op.dtype, *op.group, topo_, op.root_index);
  e.counted = res.counted;
  // A device-timed (or simulated) backend's own interval; the wall clock would include its
  // stream's wait for compute.
  e.time_s = res.device_seconds >= 0 ? res.device_seconds : wall_s;
  e.tag = std::move(tag);
  e.stream = stream;
  std::lock_guard<std::mutex> lock(impl_->ledger_m);  // readers wait for synchronize()
  ledger_.record(e);
  return res;
}

// Issue-side validation happens on the caller's thread, so a bad call fails at its source.
static void validate(const CollectiveOp& op) {
  SB_CHECK(op.group != nullptr && op.group->size() >= 1, "collective without a group");
  if (op.kind == CollKind::kBarrier) return;
  if (op.count > 0)
    SB_CHECK(op.send != nullptr && op.recv != nullptr, coll_name(op.kind) << ": null buffer");
  const size_t n = size_t(op.group->size());
  const bool sums = op.kind == CollKind::kAllReduce || op.kind == CollKind::kReduceScatter ||
                    op.kind == CollKind::kReduce;
  SB_CHECK(!(sums && op.dtype == DType::kI8), coll_name(op.kind) << ": int8 codes are not summed");
  if (op.kind == CollKind::kAllToAll) {
    const size_t bytes = op.count * dtype_bytes(op.dtype);
    const auto s = reinterpret_cast<uintptr_t>(op.send), r = reinterpret_cast<uintptr_t>(op.recv);
    SB_CHECK(bytes == 0 || s + bytes <= r || r + bytes <= s, "all_to_all: send and recv overlap");
  }
  if (op.kind == CollKind::kReduceScatter || op.kind == CollKind::kAllGather ||
      op.kind == CollKind::kAllToAll)
    SB_CHECK(op.count % n == 0, coll_name(op.kind)
                                    << ": count " << op.count << " not a multiple of " << n);
  if (op.kind == CollKind::kBroadcast || op.kind == CollKind::kReduce)
    SB_CHECK(op.root_index >= 0 && op.root_index < int(n),
             coll_name(op.kind) << " root " << op.root_index << " of " << n);
}

CommHandle Communicator::all_reduce_async(void* buf, size_t count, DType t, GroupKind g,
                                          std::string tag, CommStream stream,
                                          const CommHandle& input) {
  CollectiveOp op{CollKind::kAllReduce, &group(g), buf, buf, count, t, 0};
  return submit(op, std::move(tag), stream, input);
}

CommHandle Communicator::submit_per_rank(CollKind k, const void* send, void* recv,
                                         size_t per_rank, DType t, GroupKind g, std::string tag) {
  const Group& grp = group(g);
  CollectiveOp op{k, &grp, send, recv, per_rank * size_t(grp.size()), t, 0};
  return submit(op, std::move(tag));
}

CommHandle Communicator::reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                              DType t, GroupKind g, std::string tag) {
  return submit_per_rank(CollKind::kReduceScatter, send, recv, recv_count, t, g, std::move(tag));
}

CommHandle Communicator::all_gather_async(const void* send, void* recv, size_t send_count, DType t,
                                          GroupKind g, std::string tag) {
  return submit_per_rank(CollKind::kAllGather, send, recv, send_count, t, g, std::move(tag));
}

CommHandle Communicator::broadcast_async(void* buf, size_t count, DType t, int root_index,
                                         GroupKind g, std::string tag) {
  CollectiveOp op{CollKind::kBroadcast, &group(g), buf, buf, count, t, root_index};
  return submit(op, std::move(tag));
}

CommHandle Communicator::reduce_async(void* buf, size_t count, DType t, int root_index,
                                      GroupKind g, std::string tag) {
  CollectiveOp op{CollKind::kReduce, &group(g), buf, buf, count, t, root_index};
  return submit(op, std::move(tag));
}

CommHandle Communicator::all_to_all_async(const void* send, void* recv, size_t block_count,
                                          DType t, GroupKind g, std::string tag) {
  return submit_per_rank(CollKind::kAllToAll, send, recv, block_count, t, g, std::move(tag));
}

CommHandle Communicator::barrier_async(GroupKind g) {
  CollectiveOp op{CollKind::kBarrier, &group(g), nullptr, nullptr, 0, DType::kF32, 0};
  return submit(op, {});
}

CommHandle Communicator::submit(const CollectiveOp& issued, std::string tag, CommStream stream,
                                const CommHandle& input) {
  validate(issued);
  const int si = std::min(int(stream), impl_->num_streams - 1);
  // the stream's FIFO orders an input issued on the same stream already
  const bool other_input = input.state_ != nullptr && si != 0;
  CollectiveOp op = issued;
  CommBackend& backend = *impl_->streams[si].backend;
  op.issue_mark = backend.on_issue();  // on this thread, in issue order
  auto state = std::make_shared<CommHandle::State>();
  state->tally = impl_->tally;
  if (backend.runs_at_issue()) {
    state->seq = impl_->issued++;  // no comm thread: nothing else touches the counters
    if (other_input) op.ready_s = input.state_->end_s;
    const BackendResult res = run_and_record(op, std::move(tag), state->seq, si);
    state->simulated = &backend;
    state->end_s = res.end_s;
    state->done.store(true);
    return CommHandle(std::move(state));
  }
  {
    std::lock_guard<std::mutex> lock(impl_->m);
    SB_CHECK(!impl_->stop, "collective issued on a communicator being destroyed");
    state->seq = impl_->issued;
    state->issued_at = Clock::now();
    impl_->streams[si].queue.push_back(
        Impl::Task{op, std::move(tag), state, other_input ? input.state_ : nullptr});
    ++impl_->issued;
  }
  impl_->streams[si].cv_work.notify_one();
  return CommHandle(std::move(state));
}

void Communicator::synchronize() {
  if (impl_->backend().runs_at_issue()) {
    double blocked = 0;
    for (int s = 0; s < impl_->num_streams; ++s) blocked += impl_->streams[s].backend->wait_all();
    impl_->tally->add_simulated(CommWait::kAllOps, blocked, impl_->backend().now_s());
    return;
  }
  const auto t0 = Clock::now();
  {
    std::unique_lock<std::mutex> lock(impl_->m);
    impl_->cv_idle.wait(lock, [&] { return impl_->completed == impl_->issued; });
  }
  impl_->tally->add(CommWait::kAllOps, t0);
  sort_ledger_tail();
}

// Two streams complete out of issue order; readers (phases, trace, byte sums) expect issue order.
void Communicator::sort_ledger_tail() {
  std::lock_guard<std::mutex> lock(impl_->ledger_m);
  auto& entries = ledger_.mutable_entries();
  auto from = entries.end();
  while (from != entries.begin() && std::prev(from)->seq >= impl_->synced_seq) --from;
  const auto by_seq = [](const LedgerEntry& a, const LedgerEntry& b) { return a.seq < b.seq; };
  std::stable_sort(from, entries.end(), by_seq);
  std::lock_guard<std::mutex> issue_lock(impl_->m);
  impl_->synced_seq = impl_->issued;
}

double Communicator::blocked_seconds() const { return double(impl_->tally->ns.load()) * 1e-9; }
void Communicator::reset_blocked_seconds() { impl_->tally->ns.store(0); }

void Communicator::record_waits(bool on) {
  impl_->tally->log_on.store(on);
  if (!on) take_waits();
}

std::vector<CommWait> Communicator::take_waits() {
  std::lock_guard<std::mutex> lock(impl_->tally->m);
  return std::exchange(impl_->tally->log, {});
}

}  // namespace sb
