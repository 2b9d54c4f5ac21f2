// The predictor's simulated communication backend, behind the same Communicator as MPI and
// NCCL: no data moves; each collective runs at issue on the caller's thread, its bytes are the
// ring schedule's (the Communicator's ledger and the TrafficAccount, which sums every rank of
// the symmetric world), and its completion is a logical time on its communication stream (one
// SimBackend per CommStream, sharing the clock): start = max(issue time on the compute clock,
// stream free, input from the other stream done), duration = traffic.cc's alpha-beta time of
// its link classes (two streams do not slow each other). wait() moves the compute clock to the
// completion. Where the cluster times collectives beside compute on shared cores, the clock
// times each as beside compute at issue and re-times it where the compute blocks on it.
#pragma once

#include <memory>

#include "harness/comm/communicator.h"
#include "harness/predict/sim_device.h"
#include "harness/predict/traffic.h"

namespace sb {

class SimBackend final : public CommBackend {
 public:
  SimBackend(SimClock& clock, TrafficAccount* account, CommStream stream = CommStream::kMain)
      : clock_(clock),
        account_(account),
        stream_(stream == CommStream::kMain ? 0 : 1),
        free_s_(stream == CommStream::kMain ? clock.comm_free_s : clock.side_comm_free_s) {}
  // Where the next collectives are summed (the measured step gets an account of its own).
  void set_account(TrafficAccount* account) { account_ = account; }

  std::string name() const override { return "sim"; }
  BackendResult run(const CollectiveOp& op) override;
  bool runs_at_issue() const override { return true; }
  double wait_until(double end_s) override;
  bool done_by_now(double end_s) const override;
  double wait_all() override;
  double now_s() const override { return clock_.compute_s; }

 private:
  SimClock& clock_;
  TrafficAccount* account_;
  int stream_;      // SimClock's index of this backend's stream
  double& free_s_;  // when this backend's stream is next idle (a SimClock field)
};

}  // namespace sb
