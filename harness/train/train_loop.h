// The step loop, written once for both uses: the measured run (MPI, a real device) and the
// predictor's dry run (a simulated device and backend). It owns setup, warm-up and measured
// steps, the peak window and the timers, and leaves what is not training to step observers
// (fault injection, link sampling). It never touches MPI: the few scalars it reduces over the
// ranks go through CrossRank, so this file links into the MPI-free predictor.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/device/device.h"
#include "harness/memory/tracker.h"
#include "harness/model/config.h"
#include "harness/train/phase_clock.h"
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
  bool trace = false;  // build each rank's timeline (--trace; harness/launch/trace.h writes it)
  std::string ds_config;                       // --ds-config FILE, empty if none
  std::vector<std::string> ds_config_ignored;  // its keys accepted but not modelled
  int ds_config_stage = 0;                     // its zero_optimization.stage (0: no file)
  // Hidden test flag --inject-fault rank:step:kind. `step` counts every step this process has
  // run across the matrix (0-based), so strategy k's first step is k * (warmup + steps).
  struct Fault { int rank = -1; int step = -1; std::string kind; } fault;  // exit | hang | oom
  // Hidden test flag --inject-slowdown f: every step sleeps f x its own time before it ends
  // (the gate's test: a real, proportional slowdown that compare.py must catch).
  double inject_slowdown = 0;
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
  // The same for what a bf16-mixed PyTorch / DeepSpeed step holds (tracker.h's Held; equal
  // to the above under fp32); this rank's, for the predictor's simulated rank.
  uint64_t held_peak_bytes = 0;
  MemBreakdown held_breakdown_at_peak{};
  uint64_t model_state_params = 0, model_state_grads = 0, model_state_optimizer = 0;  // max
  uint64_t rss_hwm_bytes = 0;        // max over ranks (process-wide, so cumulative)
  // GPU only (Device::MemoryInfo), max over ranks: the caching allocator's peak over the
  // measured steps, and the driver's view before the strategy's setup and after its steps.
  Device::MemoryInfo device_before, device_after;
  // Per measured step, max over ranks: the rank's page faults between the step's start and its
  // end (harness/memory/page_faults.h); a steady state with its memory cached shows ~0.
  std::vector<uint64_t> minor_faults, major_faults;
  // The device's caching allocator after the measured steps (bytes: max over ranks; its peak is
  // over the measured steps), and what those steps asked of it, summed over ranks: blocks
  // served from the cache (hits), new blocks from the OS (misses), blocks given back.
  CacheStats allocator;
  uint64_t measured_hits = 0, measured_misses = 0, measured_backing_frees = 0;
  std::vector<LedgerEntry> step_entries;  // this rank's collectives of the last measured step
  uint64_t payload_bytes = 0;        // this rank, per step
  HopBytes sent_local;               // this rank, per step
  uint64_t sent_intra_all = 0, sent_inter_all = 0, sent_max_rank = 0;  // over ranks, per step
  bool traffic_counted = true;
  double param_checksum = 0;
  std::vector<float> params;         // full final params (only when asked for)
  // [two-host link] per measured step, summed over the nodes' links (harness/launch/link_counter.h);
  // only where every node could read its link (ci/two_host.sh sets SB_LINK_IFACE per host).
  bool link_measured = false;
  uint64_t link_bytes_measured = 0;          // Σ tx of every link end, retransmits subtracted
  uint64_t link_harness_bytes_measured = 0;  // of which the loop's own scalar reductions
  uint64_t link_overhead_model_bytes = 0;    // modelled headers + MPI protocol of the inter sends
  uint64_t link_retrans_segs = 0;            // TCP segments sent again, all measured steps
};

// The few scalars the loop agrees on over every rank of the job (MPI on the main thread in a
// run; the symmetric world of the dry run, where every rank holds the same value).
class CrossRank {
 public:
  virtual ~CrossRank() = default;
  virtual double max(double v) = 0;
  virtual double sum(double v) = 0;
  virtual uint64_t max_u64(uint64_t v) = 0;
  virtual uint64_t sum_u64(uint64_t v) = 0;
  virtual void broadcast_string(std::string& s, int root) = 0;
};

// What the loop lets others do between steps, on every rank, with no collective in flight.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void before_step(int step, MemoryTracker& memory) {}  // batch made, compute not begun
  virtual void measured_begin() {}  // before the first measured step
  virtual void measured_end() {}    // after the last measured step
};

// What the loop trains: GptModel by default; the dry run of a bare parameter count (no
// architecture) hands in a stand-in that only calls the hooks.
class Workload {
 public:
  virtual ~Workload() = default;
  virtual float forward(const int* tokens, const int* targets, ModelHooks& hooks) = 0;
  virtual void backward(ModelHooks& hooks) = 0;
};
using WorkloadFactory =
    std::function<std::unique_ptr<Workload>(const RunConfig&, Device&, MemoryTracker&)>;

struct TrainContext {
  TrainContext(Communicator& c, Device& d, CrossRank& r) : comm(c), device(d), ranks(r) {}
  Communicator& comm;
  Device& device;
  CrossRank& ranks;
  std::vector<StepObserver*> observers;
  WorkloadFactory workload;   // null: GptModel of cfg.model
  const ModelLayout* layout = nullptr;  // null: make_layout(cfg.model)
  bool gather_params = true;  // checksum the final parameters (false: the dry run has none)
  bool keep_params = false;   // keep them in StrategyRun::params
};

enum class Verdict { kOk, kOom, kError };

// What a bf16-mixed stack holds for this strategy's buffers (tracker.h's HeldPolicy).
HeldPolicy held_policy(const StrategyDescription& d, const StrategyOptions& o);

// Setup, warm-up and measured steps of one strategy: this rank's figures in `run` (losses and
// step times already reduced over ranks). Never throws for a failing strategy: the verdict and
// run.error say what happened on this rank.
Verdict train(const StrategyEntry& entry, const RunConfig& cfg, TrainContext& ctx,
              StrategyRun& run);
// One failing rank fails the strategy everywhere: every rank learns the worst verdict and the
// message of the lowest rank that has one. Returns false (and sets run.status) on failure.
bool agree_on_verdict(Verdict mine, CrossRank& ranks, const Topology& topo, StrategyRun& run);
// Folds the cross-rank aggregates of traffic and memory into `run` (every rank the same).
void aggregate_over_ranks(CrossRank& ranks, const Topology& topo, StrategyRun& run);

// What a run at precision p asks of the device's matmuls: bf16 for bf16-mixed (autocast).
MatmulPrecision matmul_precision_for(Precision p);

// Σ p_i (1 + i mod 7) / Ψ in double: order-sensitive, so a permuted or shifted parameter shows.
double param_checksum(const std::vector<float>& params);

}  // namespace sb
