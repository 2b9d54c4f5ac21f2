// The simulated backend's clock (see header).
#include "harness/predict/sim_backend.h"

#include <algorithm>

namespace sb {

BackendResult SimBackend::run(const CollectiveOp& op) {
  const double duration =
      account_->add(
      PredictedCall{op.kind, op.group->kind, uint64_t(op.count), op.dtype, op.root_index});
  BackendResult r;
  r.counted = false;  // the ledger takes the ring model's bytes: this is a prediction
  if (clock_.beside_compute) {
    // op.ready_s: its input on the other stream, by the key its issue returned.
    double start = 0;
    r.end_s = clock_.issue(stream_, clock_.compute_s, duration, account_->last_beside_compute_s(),
                           account_->last_cpu_share(), start, op.ready_s);
    r.device_seconds = r.end_s - start;
    return r;
  }
  const double start = std::max({clock_.compute_s, free_s_, op.ready_s});
  free_s_ = start + duration;
  if (clock_.serial && duration > 0)
    clock_.comm_windows.push_back({start, free_s_, account_->last_cpu_share()});
  r.device_seconds = duration;
  r.end_s = free_s_;
  return r;
}

double SimBackend::wait_until(double end_s) {
  const double until = clock_.beside_compute ? clock_.block_on(stream_, end_s) : end_s;
  const double blocked = std::max(0.0, until - clock_.compute_s);
  clock_.compute_s += blocked;
  return blocked;
}

bool SimBackend::done_by_now(double end_s) const {
  return (clock_.beside_compute ? clock_.end_of(stream_, end_s) : end_s) <= clock_.compute_s;
}

double SimBackend::wait_all() {
  return wait_until(clock_.beside_compute ? clock_.last_key(stream_) : free_s_);
}

}  // namespace sb
