// The Communicator front end: validates each call on the caller's thread, queues it for the one
// communication thread of this rank, which runs the ops in FIFO issue order (a "comm stream")
// and appends one Ledger entry per op. Threading: while a Communicator lives, every MPI call of
// the run happens on its comm thread, so MPI_THREAD_SERIALIZED suffices; the ledger is read by
// others only after synchronize(). It does not move bytes itself: that is the backend's job.
#include "harness/comm/communicator.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "harness/comm/watchdog.h"
#include "harness/common/check.h"

namespace sb {
namespace {
using Clock = std::chrono::steady_clock;
int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}
}  // namespace

struct CommHandle::State {
  std::mutex m;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  std::shared_ptr<std::atomic<int64_t>> blocked_ns;  // the communicator's exposed-time tally
  CommBackend* simulated = nullptr;  // set when the backend runs at issue: its logical clock
  double end_s = 0;                  // and the op's logical completion time on it
};

namespace {
void add_seconds(std::atomic<int64_t>& ns, double s) { ns.fetch_add(int64_t(s * 1e9 + 0.5)); }
}  // namespace

void CommHandle::wait() {
  if (state_ && state_->simulated) {
    add_seconds(*state_->blocked_ns, state_->simulated->wait_until(state_->end_s));
    return;
  }
  if (!state_ || state_->done.load(std::memory_order_acquire)) return;
  const auto t0 = Clock::now();
  {
    std::unique_lock<std::mutex> lock(state_->m);
    state_->cv.wait(lock, [&] { return state_->done.load(std::memory_order_acquire); });
  }
  state_->blocked_ns->fetch_add(ns_since(t0));
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
  };
  std::unique_ptr<CommBackend> backend;
  std::shared_ptr<std::atomic<int64_t>> blocked_ns = std::make_shared<std::atomic<int64_t>>(0);
  std::mutex m;
  std::condition_variable cv_work, cv_idle;
  std::deque<Task> queue;
  uint64_t issued = 0, completed = 0;
  bool stop = false;
  std::thread thread;
};

Communicator::Communicator(const Topology& topo, std::unique_ptr<CommBackend> backend,
                           Ledger& ledger)
    : topo_(topo), ledger_(ledger), impl_(std::make_unique<Impl>()) {
  SB_CHECK(backend != nullptr, "a Communicator needs a backend");
  impl_->backend = std::move(backend);
  if (impl_->backend->runs_at_issue()) return;  // a simulation: ops run in submit()
  Impl* impl = impl_.get();
  impl->thread = std::thread([this, impl] {
    for (;;) {
      Impl::Task task;
      {
        std::unique_lock<std::mutex> lock(impl->m);
        impl->cv_work.wait(lock, [&] { return impl->stop || !impl->queue.empty(); });
        if (impl->queue.empty()) return;  // stop requested and drained
        task = std::move(impl->queue.front());
        impl->queue.pop_front();
      }
      run_and_record(task.op, std::move(task.tag));
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
  impl_->cv_work.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string Communicator::backend_name() const { return impl_->backend->name(); }

BackendResult Communicator::run_and_record(const CollectiveOp& op, std::string tag) {
  const auto t0 = Clock::now();
  BackendResult res;
  if (impl_->backend->runs_at_issue()) {
    res = impl_->backend->run(op);  // nothing to wait on: no watchdog
  } else {
    const Group& g = *op.group;
    const int prev = g.ranks[(g.index + g.size() - 1) % g.size()];
    Watchdog::Scope watch(std::string(coll_name(op.kind)) + " over " + group_name(g.kind) + " (" +
                          std::to_string(g.size()) + " ranks, " + std::to_string(op.count) +
                          " x " + dtype_name(op.dtype) + (tag.empty() ? "" : ", " + tag) +
                          ") waiting on ring predecessor rank " + std::to_string(prev));
    res = impl_->backend->run(op);
  }
  const double wall_s = double(ns_since(t0)) * 1e-9;
  LedgerEntry e;
  e.kind = op.kind;
  e.group = op.group->kind;
  e.group_size = op.group->size();
  e.count = op.count;
  e.dtype = op.dtype;
  e.payload_bytes = uint64_t(op.count) * dtype_bytes(op.dtype);
  e.sent = res.counted
               ? res.sent
               : ring_model_sent(op.kind, op.count, op.dtype, *op.group, topo_, op.root_index);
  e.counted = res.counted;
  // A device-timed (or simulated) backend's own interval; the wall clock would include its
  // stream's wait for compute.
  e.time_s = res.device_seconds >= 0 ? res.device_seconds : wall_s;
  e.tag = std::move(tag);
  ledger_.record(e);  // only one thread appends; readers wait for synchronize()
  return res;
}

// Issue-side validation happens on the caller's thread, so a bad call fails at its source.
static void validate(const CollectiveOp& op) {
  SB_CHECK(op.group != nullptr && op.group->size() >= 1, "collective without a group");
  if (op.kind == CollKind::kBarrier) return;
  if (op.count > 0)
    SB_CHECK(op.send != nullptr && op.recv != nullptr, coll_name(op.kind) << ": null buffer");
  const size_t n = size_t(op.group->size());
  if (op.kind == CollKind::kReduceScatter || op.kind == CollKind::kAllGather)
    SB_CHECK(op.count % n == 0, coll_name(op.kind)
                                    << ": count " << op.count << " not a multiple of " << n);
  if (op.kind == CollKind::kBroadcast)
    SB_CHECK(op.root_index >= 0 && op.root_index < int(n), "broadcast root " << op.root_index);
}

CommHandle Communicator::all_reduce_async(void* buf, size_t count, DType t, GroupKind g,
                                          std::string tag) {
  CollectiveOp op{CollKind::kAllReduce, &group(g), buf, buf, count, t, 0};
  return submit(op, std::move(tag));
}

CommHandle Communicator::reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                              DType t, GroupKind g, std::string tag) {
  const Group& grp = group(g);
  const size_t count = recv_count * size_t(grp.size());  // LedgerEntry: RS counts its input
  CollectiveOp op{CollKind::kReduceScatter, &grp, send, recv, count, t, 0};
  return submit(op, std::move(tag));
}

CommHandle Communicator::all_gather_async(const void* send, void* recv, size_t send_count, DType t,
                                          GroupKind g, std::string tag) {
  const Group& grp = group(g);
  const size_t count = send_count * size_t(grp.size());  // LedgerEntry: AG counts its output
  CollectiveOp op{CollKind::kAllGather, &grp, send, recv, count, t, 0};
  return submit(op, std::move(tag));
}

CommHandle Communicator::broadcast_async(void* buf, size_t count, DType t, int root_index,
                                         GroupKind g, std::string tag) {
  CollectiveOp op{CollKind::kBroadcast, &group(g), buf, buf, count, t, root_index};
  return submit(op, std::move(tag));
}

CommHandle Communicator::barrier_async(GroupKind g) {
  CollectiveOp op{CollKind::kBarrier, &group(g), nullptr, nullptr, 0, DType::kF32, 0};
  return submit(op, {});
}

CommHandle Communicator::submit(const CollectiveOp& issued, std::string tag) {
  validate(issued);
  CollectiveOp op = issued;
  op.issue_mark = impl_->backend->on_issue();  // on this thread, in issue order
  auto state = std::make_shared<CommHandle::State>();
  state->blocked_ns = impl_->blocked_ns;
  if (impl_->backend->runs_at_issue()) {
    const BackendResult res = run_and_record(op, std::move(tag));
    state->simulated = impl_->backend.get();
    state->end_s = res.end_s;
    state->done.store(true);
    return CommHandle(std::move(state));
  }
  {
    std::lock_guard<std::mutex> lock(impl_->m);
    SB_CHECK(!impl_->stop, "collective issued on a communicator being destroyed");
    impl_->queue.push_back(Impl::Task{op, std::move(tag), state});
    ++impl_->issued;
  }
  impl_->cv_work.notify_one();
  return CommHandle(std::move(state));
}

void Communicator::synchronize() {
  if (impl_->backend->runs_at_issue()) {
    add_seconds(*impl_->blocked_ns, impl_->backend->wait_all());
    return;
  }
  const auto t0 = Clock::now();
  {
    std::unique_lock<std::mutex> lock(impl_->m);
    impl_->cv_idle.wait(lock, [&] { return impl_->completed == impl_->issued; });
  }
  impl_->blocked_ns->fetch_add(ns_since(t0));
}

double Communicator::blocked_seconds() const { return double(impl_->blocked_ns->load()) * 1e-9; }
void Communicator::reset_blocked_seconds() { impl_->blocked_ns->store(0); }

}  // namespace sb
