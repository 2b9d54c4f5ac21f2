// The simulated backend's clock (see header).
#include "harness/predict/sim_backend.h"

#include <algorithm>

namespace sb {

BackendResult SimBackend::run(const CollectiveOp& op) {
  const double duration =
      account_->add(
      PredictedCall{op.kind, op.group->kind, uint64_t(op.count), op.dtype, op.root_index});
  const double start = std::max({clock_.compute_s, free_s_, op.ready_s});
  free_s_ = start + duration;
  if (clock_.serial && duration > 0)
    clock_.comm_windows.push_back({start, free_s_, account_->last_cpu_share()});
  BackendResult r;
  r.counted = false;  // the ledger takes the ring model's bytes: this is a prediction
  r.device_seconds = duration;
  r.end_s = free_s_;
  return r;
}

double SimBackend::wait_until(double end_s) {
  const double blocked = std::max(0.0, end_s - clock_.compute_s);
  clock_.compute_s += blocked;
  return blocked;
}

}  // namespace sb
