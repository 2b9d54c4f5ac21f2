// The step loop: runs one strategy for warm-up + measured steps on this MPI job and returns
// what was measured (step times, losses, memory, the ledger of one step, parameters). It owns
// the loop and the timers; the strategy owns the policy; the report module owns the JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/comm/mpi_runtime.h"
#include "harness/device/device.h"
#include "harness/memory/tracker.h"
#include "harness/model/config.h"
#include "harness/run/phase_clock.h"
#include "strategies/strategy.h"

namespace sb {

struct RunConfig {
  GptConfig model;
  int batch_per_rank = 4;
  int steps = 5;     // measured
  int warmup = 1;    // run, not measured (losses are still recorded)
  double mem_limit_gb = 0;  // per rank, 0 = none
  CollectiveImpl collectives = CollectiveImpl::kRing;
  std::string device = "cpu";
  StrategyOptions options;
  bool trace = false;  // build each rank's timeline (--trace; harness/run/trace.h writes it)
  // Hidden test flag --inject-fault rank:step:kind. `step` counts every step this process has
  // run across the matrix (0-based), so strategy k's first step is k * (warmup + steps).
  struct Fault { int rank = -1; int step = -1; std::string kind; } fault;  // exit | hang | oom
};

// What one rank measured, with the cross-rank aggregates already folded in (identical on
// every rank after run_strategy returns).
struct StrategyRun {
  std::string strategy;
  std::string status = "ok";  // ok | oom | error
  std::string error;
  StrategyDescription description;
  uint64_t padded_params = 0;
  std::vector<double> step_time_s;   // per measured step, max over ranks
  std::vector<double> exposed_s;     // per measured step, max over ranks
  std::vector<StepPhases> phases;    // per measured step, the slowest rank's (phase_clock.h)
  RankTrace trace;                   // this rank's timeline of the measured steps (--trace)
  std::vector<double> loss;          // per step (warm-up included), mean over ranks
  uint64_t peak_bytes = 0;           // max over ranks
  MemBreakdown breakdown_at_peak{};  // of the rank with the highest peak
  uint64_t model_state_params = 0, model_state_grads = 0, model_state_optimizer = 0;  // max
  uint64_t rss_hwm_bytes = 0;        // max over ranks (process-wide, so cumulative)
  // GPU only (Device::MemoryInfo), max over ranks: the caching allocator's peak over the
  // measured steps, and the driver's view before the strategy's setup and after its steps.
  Device::MemoryInfo device_before, device_after;
  std::vector<LedgerEntry> step_entries;  // this rank's collectives of the last measured step
  uint64_t payload_bytes = 0;        // this rank, per step
  HopBytes sent_local;               // this rank, per step
  uint64_t sent_intra_all = 0, sent_inter_all = 0, sent_max_rank = 0;  // over ranks, per step
  bool traffic_counted = true;
  double param_checksum = 0;
  std::vector<float> params;         // full final params (only when asked for)
  // [two-host link] per measured step, summed over the nodes' links (harness/run/link_counter.h);
  // only where every node could read its link (ci/two_host.sh sets SB_LINK_IFACE per host).
  bool link_measured = false;
  uint64_t link_bytes_measured = 0;          // Σ tx of every link end, retransmits subtracted
  uint64_t link_harness_bytes_measured = 0;  // of which the loop's own scalar reductions
  uint64_t link_overhead_model_bytes = 0;    // modelled headers + MPI protocol of the inter sends
  uint64_t link_retrans_segs = 0;            // TCP segments sent again, all measured steps
};

// Runs `name` under cfg. Never throws for a failing strategy: the failure is the status.
StrategyRun run_strategy(const std::string& name, const RunConfig& cfg, MpiRuntime& mpi,
                         Communicator& comm, Device& device, bool keep_params = false);

// What a run at precision p asks of the device's matmuls: bf16 for bf16-mixed (autocast).
MatmulPrecision matmul_precision_for(Precision p);

// Σ p_i (1 + i mod 7) / Ψ in double: order-sensitive, so a permuted or shifted parameter shows.
double param_checksum(const std::vector<float>& params);

}  // namespace sb
