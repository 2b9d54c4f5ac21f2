// `shardbench predict`'s engine: what a strategy costs per rank and per step on a cluster that
// is not here, from a dry run of the trainer's step loop with the real strategy on a simulated
// device and backend (sim_device.h, sim_backend.h): memory at rest and at the peak with its
// breakdown, bytes per collective kind split intra/inter by the ring schedule, and step time
// on the simulated clocks. Model, strategy and cluster are three separate inputs. No MPI, no
// buffers: a prediction takes milliseconds.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/predict/cluster.h"
#include "harness/predict/kernel_cost.h"
#include "harness/predict/model_shape.h"
#include "harness/predict/traffic.h"
#include "harness/train/train_loop.h"

namespace sb {

struct PredictConfig {
  std::shared_ptr<const ModelShape> model;  // model_shape(config) or bare_shape(params)
  int world = 1;
  int ranks_per_node = 1;
  int batch_per_rank = 1;
  StrategyOptions options;
  double mem_limit_gb = 0;  // per rank; 0 = the cluster's memory per rank
  // On a GPU cluster, memory as a bf16-mixed PyTorch / DeepSpeed step holds it (tracker.h's
  // Held); false (a run's own prediction): as this implementation holds it, which a run measures.
  bool stack_memory = true;
};

struct Prediction {
  std::string strategy;
  StrategyDescription description;
  uint64_t padded_params = 0;
  // Memory per rank: model state at rest, then the step's peak and its breakdown.
  uint64_t state_params = 0, state_grads = 0, state_optimizer = 0;
  uint64_t activations = 0, peak = 0;
  MemBreakdown at_peak{};
  // Whose memory peak, at_peak and activations are: "stack" (what PyTorch / DeepSpeed hold
  // under bf16-mixed on a GPU cluster) or "implementation" (this suite's model, as a run
  // measures it); implementation_peak is the latter's peak either way.
  const char* memory_of = "implementation";
  uint64_t implementation_peak = 0;
  bool model_state_only = false;  // a bare --params count: no activations or transients
  // Device memory outside the tracker's tensors (GPU clusters; all 0 on CPU): the CUDA context,
  // NCCL's buffers (NCCL_BUFFSIZE x channels x 2 ring peers per communicator the step uses),
  // and the caching allocator's reserved-over-allocated margin (sim_device.h's
  // AllocatorModel). device_peak = peak + these three; fits compares it with the limit.
  uint64_t cuda_context = 0, nccl_buffers = 0, allocator_margin = 0, device_peak = 0;
  int communicators = 0;
  double limit_bytes = 0;
  bool fits = false;
  Traffic traffic;
  // One step: model FLOPs per rank, compute and communication seconds.
  double flops_per_rank = 0, compute_s = 0, comm_s = 0, exposed_s = 0;
  double total_overlap_s = 0, total_no_overlap_s = 0, step_s = 0;  // step_s: as configured
  double tokens_per_s = 0, mfu = 0, hfu = 0;  // hfu: + checkpointing's recomputed forwards
  // The dry run's measured step by phase on the simulated clocks (PhaseClock, as a run's);
  // empty for a bare parameter count, whose compute is not run step by step.
  std::vector<StepPhases> phases;
  // compute_s by where it went (the measured step's kernels): each class, the launch floor and
  // the slow-down beside collectives; they sum to compute_s.
  ClassSeconds kernel_s{};
  double launch_s = 0, contention_s = 0;
  // The stated uncertainty of step_s (relative, one side) and its range; `outside` names why a
  // point lies outside the validated region (empty inside), where the range is doubled.
  double uncertainty = 0, step_lo_s = 0, step_hi_s = 0;
  std::string outside;
  // Every GEMM of the dry run (setup, warm-up and measured steps) by shape: the step's mix.
  std::vector<std::pair<GemmCall, uint64_t>> gemm_calls;
};

// The region bench/published validates (calibration and held-out runs): a device marked
// validated, bf16-mixed, 0.7-80 B parameters, sequence 1024-8192, 8-512 ranks. Empty when cfg
// lies inside it, else the first reason it does not.
std::string outside_validated_region(const PredictConfig& cfg, const Cluster& cluster, int world);

// The prediction config of a run's own config on its topology.
PredictConfig predict_config_for(const RunConfig& run, const Topology& topo);

// Throws std::invalid_argument for an unknown strategy or an inconsistent shape.
// With `topo`, bytes come from ring_model_sent rank by rank on that topology.
Prediction predict(const PredictConfig& cfg, const std::string& strategy, const Cluster& cluster,
                   const Topology* topo = nullptr);

// The smallest world (whole nodes of the cluster's ranks per node, or 1..G-1 ranks of one
// node) at which `strategy` fits, searched up to max_world; 0 when it never fits there.
struct FitResult {
  std::string strategy;
  int min_world = 0;
  Prediction at_min;  // valid when min_world > 0
};
FitResult smallest_fitting_world(PredictConfig cfg, const std::string& strategy,
                                 const Cluster& cluster, int max_world);

// JSON in the run's schema family (results/): kind "prediction". Defined in
// harness/launch/predict_json.cc (sb_launch), beside the run's JSON helpers it shares. `knobs`:
// every strategy knob as the command line's options table records it
// (bench/cli/options_table.h knob_config_json), merged into the config, as a run's.
nlohmann::json predict_config_json(const PredictConfig& cfg, const nlohmann::json& knobs);
nlohmann::json prediction_json(const Prediction& p);
nlohmann::json prediction_document(const PredictConfig& cfg, const Cluster& cluster,
                                   const std::vector<nlohmann::json>& results,
                                   const nlohmann::json& knobs);

// The GEMMs one rank's step issues for `model` at `batch` sequences and `options` (a 1-rank dry
// run of ddp on cpu-local: the shapes do not depend on the strategy), by shape with their
// relative counts: what a run measures its CPU's GEMM rate on (bench/cli/peak_calibration.h).
std::vector<std::pair<GemmCall, uint64_t>> step_gemm_calls(const GptConfig& model, int batch,
                                                          const StrategyOptions& options);

// For `run`: the prediction of one strategy on the run's own config and topology (bytes from
// ring_model_sent on that topology), to sit beside the measured result.
nlohmann::json predict_for_run(const RunConfig& cfg, const Topology& topo,
                               const std::string& strategy, const Cluster& cluster);
// measured / predicted for the quantities both carry (1.0 = exact), keyed like the result.
nlohmann::json prediction_residuals(const nlohmann::json& predicted, const nlohmann::json& result);

}  // namespace sb
