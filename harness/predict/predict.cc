// The prediction of one (model, strategy, shape, cluster): a dry run of the trainer's own step
// loop with the real strategy on a simulated device and communication backend (one warm-up and
// one measured step); and the fit search (see header).
#include "harness/predict/predict.h"

#include <algorithm>
#include <array>
#include <stdexcept>

#include "harness/comm/communicator.h"
#include "harness/model/checkpointing.h"
#include "harness/predict/sim_backend.h"
#include "harness/predict/sim_device.h"

namespace sb {
namespace {

// The world from one rank's view: every rank holds what the simulated rank holds.
class SymmetricRanks final : public CrossRank {
 public:
  explicit SymmetricRanks(int world) : world_(world) {}
  double max(double v) override { return v; }
  double sum(double v) override { return v * world_; }
  uint64_t max_u64(uint64_t v) override { return v; }
  uint64_t sum_u64(uint64_t v) override { return v * uint64_t(world_); }
  void broadcast_string(std::string&, int) override {}

 private:
  int world_;
};

// A bare parameter count has no architecture: its one module is entered and left in forward
// and backward, with no compute, so the strategy's hooks run as around any module.
class BareWorkload final : public Workload {
 public:
  explicit BareWorkload(const ModelLayout& l) : layout_(l) {}
  float forward(const int*, const int*, ModelHooks& h) override {
    for (int m = 0; m < int(layout_.modules.size()); ++m) {
      h.pre_forward(m);
      for (int t : layout_.modules[m].tensors) h.param(t);
      h.post_forward(m);
    }
    return 0.0f;
  }
  void backward(ModelHooks& h) override {
    for (int m = int(layout_.modules.size()) - 1; m >= 0; --m) {
      h.pre_backward(m);
      for (int t : layout_.modules[m].tensors) h.grad(t);
      h.post_backward(m);
    }
  }

 private:
  const ModelLayout& layout_;
};

// The measured step: its collectives are summed in an account of their own, its kernel time
// from the clock.
class MeasuredStep final : public StepObserver {
 public:
  MeasuredStep(std::vector<SimBackend*> backends, TrafficAccount& account, SimClock& clock)
      : backends_(std::move(backends)), account_(account), clock_(clock) {}
  void measured_begin() override {
    for (SimBackend* b : backends_) b->set_account(&account_);
    at_begin_ = clock_;
  }
  void measured_end() override {
    busy_s_ = clock_.busy_s - at_begin_.busy_s;
    comm_busy_s_ = clock_.comm_busy_s() - at_begin_.comm_busy_s();
    for (int k = 0; k < kNumKernelClasses; ++k)
      class_s_[size_t(k)] = clock_.class_s[size_t(k)] - at_begin_.class_s[size_t(k)];
    launch_s_ = clock_.launch_s - at_begin_.launch_s;
    contention_s_ = clock_.contention_s - at_begin_.contention_s;
  }
  double busy_s() const { return busy_s_; }
  void fill(Prediction& p) const {
    // Collectives re-timed where the compute blocked on them: their busy time is the clock's,
    // not the ledger's (each entry keeps its time as issued, beside compute).
    if (clock_.beside_compute)
      for (StepPhases& s : p.phases) s.comm_busy_s = comm_busy_s_;
    p.kernel_s = class_s_;
    p.launch_s = launch_s_;
    p.contention_s = contention_s_;
  }

 private:
  std::vector<SimBackend*> backends_;  // one per comm stream
  TrafficAccount& account_;
  SimClock& clock_;
  SimClock at_begin_;
  double busy_s_ = 0, launch_s_ = 0, contention_s_ = 0, comm_busy_s_ = 0;
  ClassSeconds class_s_{};
};

Topology simulated_topology(int N, int G, int partition, const Topology* topo) {
  if (topo == nullptr) return Topology::virtual_nodes(N, 0, G).with_partition(partition);
  std::vector<int> node(size_t(N), 0);
  for (int r = 0; r < N; ++r) node[size_t(r)] = topo->node_of(r);
  return Topology(N, 0, std::move(node)).with_partition(partition);
}

RunConfig dry_run_config(const PredictConfig& cfg) {
  RunConfig rc;
  rc.model = cfg.model->config;
  rc.model.vocab = std::max(1, rc.model.vocab);  // a bare count's batch has one token id
  rc.batch_per_rank = cfg.batch_per_rank;
  rc.steps = 1;
  rc.warmup = 1;  // the bf16 operand slots and every lazily made buffer reach their size
  rc.options = cfg.options;
  return rc;
}

// Model state, memory at the peak and the verdict of the dry run. On a GPU cluster the peak
// is the stack's (the dry run's held ledger, tracker.h's Held); model state is the same in both.
void fill_memory(Prediction& p, const StrategyRun& run, const ModelShape& shape,
                 const PredictConfig& cfg, const Cluster& cluster) {
  const bool bf16 = cfg.options.precision == Precision::kBf16Mixed;
  const bool stack = cfg.stack_memory && cluster.host_cores == 0 && !shape.bare;
  p.padded_params = run.padded_params;
  p.state_params = run.model_state_params;
  p.state_grads = run.model_state_grads;
  p.state_optimizer = run.model_state_optimizer;
  p.implementation_peak = run.peak_bytes;
  p.memory_of = stack ? "stack" : "implementation";
  p.activations =
      shape.bare ? 0
      : stack    ? held_activation_bytes(shape.config, cfg.batch_per_rank, bf16,
                                         held_policy(p.description, cfg.options).stream_bf16)
                 : activation_bytes(shape.config, cfg.batch_per_rank, bf16);
  p.model_state_only = shape.bare;
  if (shape.bare) {  // no architecture: the model state is all that is known
    p.peak = p.state_params + p.state_grads + p.state_optimizer;
    p.at_peak = MemBreakdown{};
    p.at_peak[int(MemCategory::kParams)] = p.state_params;
    p.at_peak[int(MemCategory::kGrads)] = p.state_grads;
    p.at_peak[int(MemCategory::kOptimizer)] = p.state_optimizer;
  } else {
    p.peak = stack ? run.held_peak_bytes : run.peak_bytes;
    p.at_peak = stack ? run.held_breakdown_at_peak : run.breakdown_at_peak;
  }
}

// Step time from the simulated clocks: the measured step as configured, its kernel time, its
// collectives back to back and the time the compute stream waited for them.
void fill_time(Prediction& p, const StrategyRun& run, double busy_s, const ModelShape& shape,
               const PredictConfig& cfg, const Cluster& cluster, int N) {
  const bool bf16 = cfg.options.precision == Precision::kBf16Mixed;
  const uint64_t tokens = uint64_t(cfg.batch_per_rank) * uint64_t(cfg.options.grad_accum) *
                          uint64_t(shape.config.seq_len);
  p.flops_per_rank = predict_flops(shape, tokens);
  const double rate = cluster.peak_flops(bf16) * cluster.compute_efficiency;
  // A bare count has no kernels to run: its compute is the 6·Ψ·tokens rule, added serially.
  p.compute_s = shape.bare ? p.flops_per_rank / rate * cluster.compute_slowdown(N) : busy_s;
  p.comm_s = p.traffic.comm_s;
  p.exposed_s = run.exposed_s.empty() ? 0 : run.exposed_s.front();
  const double simulated = run.step_time_s.empty() ? 0 : run.step_time_s.front();
  p.step_s = shape.bare ? p.compute_s + simulated : simulated;
  p.total_no_overlap_s = p.compute_s + p.comm_s;
  // The simulated step is at most its kernels plus its collectives back to back (up to the
  // rounding of summing the same terms in another order).
  p.total_overlap_s =
      cfg.options.overlap ? std::min(p.step_s, p.total_no_overlap_s) : p.total_no_overlap_s;
  if (p.step_s > 0) {
    p.tokens_per_s = double(tokens) * N / p.step_s;
    p.mfu = p.flops_per_rank / p.step_s / cluster.peak_flops(bf16);
    const double recompute = shape.bare ? 0 : recompute_flops_per_step(shape.config, tokens);
    p.hfu = (p.flops_per_rank + recompute) / p.step_s / cluster.peak_flops(bf16);
  }
}

// The step's relative uncertainty: each part of the step at its own stated spread (the
// kernel classes, the launch floor, contention at the comm figure's, exposed communication),
// weighted by its share of the step; at least 10 % for what no kernel carries (framework,
// data loading, stragglers); doubled outside the validated region.
void fill_uncertainty(Prediction& p, const PredictConfig& cfg, const Cluster& cluster, int N) {
  if (p.step_s <= 0) return;
  double u = 0;
  for (int k = 0; k < kNumKernelClasses; ++k)
    u += p.kernel_s[size_t(k)] * class_uncertainty(KernelClass(k));
  u += p.launch_s * kLaunchUncertainty + (p.contention_s + p.exposed_s) * kCommUncertainty;
  if (p.model_state_only) u += p.compute_s * class_uncertainty(KernelClass::kGemm);
  u = std::max(0.10, u / p.step_s);
  p.outside = outside_validated_region(cfg, cluster, N);
  if (!p.outside.empty()) u *= 2;
  p.uncertainty = u;
  p.step_lo_s = p.step_s / (1 + u);
  p.step_hi_s = p.step_s * (1 + u);
}

// The device memory a GPU rank holds beside its tensors (Prediction's runtime categories).
void fill_runtime(Prediction& p, const Cluster& cluster, const AllocatorModel& allocations) {
  p.device_peak = p.peak;
  if (cluster.host_cores > 0) return;  // CPU: ranks are processes, no device context
  std::array<bool, kNumGroupKinds> used{};
  for (const auto& kind : p.traffic.by_kind)
    for (int g = 0; g < kNumGroupKinds; ++g) used[size_t(g)] = used[size_t(g)] || kind[g].sent_bytes > 0;
  p.communicators = int(std::count(used.begin(), used.end(), true));
  p.cuda_context = uint64_t(cluster.cuda_context_bytes);
  p.nccl_buffers = uint64_t(cluster.nccl_buffsize_bytes) * uint64_t(cluster.nccl_channels) * 2 *
                   uint64_t(p.communicators);
  p.allocator_margin = p.model_state_only ? 0 : allocations.margin();
  p.device_peak = p.peak + p.cuda_context + p.nccl_buffers + p.allocator_margin;
}

}  // namespace

std::string outside_validated_region(const PredictConfig& cfg, const Cluster& cluster,
                                     int world) {
  const ModelShape& m = *cfg.model;
  if (!cluster.kernels.validated) return "device " + cluster.device + " not validated";
  if (cfg.options.precision != Precision::kBf16Mixed) return "precision not bf16-mixed";
  if (m.bare) return "a bare parameter count";
  if (m.num_params < 700'000'000ull || m.num_params > 80'000'000'000ull)
    return "parameters outside 0.7-80 B";
  if (m.config.seq_len < 1024 || m.config.seq_len > 8192) return "sequence outside 1024-8192";
  if (world < 8 || world > 512) return "world outside 8-512";
  return "";
}

PredictConfig predict_config_for(const RunConfig& run, const Topology& topo) {
  PredictConfig cfg;
  cfg.model = model_shape(run.model);
  cfg.world = topo.world_size();
  cfg.ranks_per_node = topo.ranks_per_node();
  cfg.batch_per_rank = run.batch_per_rank;
  cfg.options = run.options;
  cfg.mem_limit_gb = run.mem_limit_gb;
  cfg.stack_memory = false;  // the run measures this implementation's memory
  return cfg;
}

Prediction predict(const PredictConfig& cfg, const std::string& strategy, const Cluster& cluster,
                   const Topology* topo) {
  const StrategyEntry* entry = find_strategy(strategy);
  if (entry == nullptr) throw std::invalid_argument("--strategies: unknown strategy " + strategy);
  if (!cfg.model) throw std::invalid_argument("predict: no model");
  const int N = topo ? topo->world_size() : cfg.world;
  const int G = topo ? topo->ranks_per_node() : cfg.ranks_per_node;
  if (N < 1 || G < 1 || N % G != 0)
    throw std::invalid_argument("--world " + std::to_string(N) +
                                ": must be a whole number of nodes of --ranks-per-node " +
                                std::to_string(G));
  const ModelShape& shape = *cfg.model;
  Prediction p;
  p.strategy = strategy;
  p.description = entry->description;

  // The simulated rank 0 of the world: its device, its communicator, the loop's own driver.
  // On a given topology its partitions (the run's); otherwise the option (0: the node).
  const int P = topo ? topo->partition_size() : cfg.options.mics_shard_size;
  if (P < 0 || (P > 0 && N % P != 0))
    throw std::invalid_argument("--mics-shard-size " + std::to_string(P) +
                                ": must divide the world size " + std::to_string(N));
  const Topology sim_topo = simulated_topology(N, G, P, topo);
  SimClock clock;
  clock.serial = cluster.oversubscription(N) > 1.0;
  // The waits beside compute were measured at one world, as the slow-down was.
  clock.beside_compute = clock.serial && N == cluster.measured_world &&
                         cluster.beside_compute_base_s + cluster.beside_compute_step_s > 0;
  if (clock.beside_compute) {
    clock.sync_s = cluster.after_compute_sync_s;
    clock.sync_after_s = cluster.after_compute_burst_s;
  }
  AllocatorModel allocations;
  const std::unique_ptr<Device> device = make_sim_device(
      cluster, N, clock, shape.bare ? nullptr : &shape.config, cfg.batch_per_rank, &allocations);
  auto account = [&] {
    return topo ? TrafficAccount(sim_topo, cluster) : TrafficAccount(N, G, cluster, P);
  };
  TrafficAccount setup_account = account(), step_account = account();
  auto backend = std::make_unique<SimBackend>(clock, &setup_account);
  auto side = std::make_unique<SimBackend>(clock, &setup_account, CommStream::kSide);
  MeasuredStep measured({backend.get(), side.get()}, step_account, clock);
  Ledger ledger;
  Communicator comm(sim_topo, std::move(backend), ledger, std::move(side));
  SymmetricRanks ranks(N);
  TrainContext ctx(comm, *device, ranks);
  ctx.observers = {&measured};
  ctx.gather_params = false;
  ctx.layout = &shape.layout;
  if (shape.bare)
    ctx.workload = [&](const RunConfig&, Device&, MemoryTracker&) {
      return std::make_unique<BareWorkload>(shape.layout);
    };
  const RunConfig rc = dry_run_config(cfg);
  StrategyRun run;
  if (train(*entry, rc, ctx, run) == Verdict::kError)
    throw std::invalid_argument("predict " + strategy + ": " + run.error);

  fill_memory(p, run, shape, cfg, cluster);
  p.limit_bytes =
      cfg.mem_limit_gb > 0 ? cfg.mem_limit_gb * double(1ull << 30) : cluster.memory_per_rank(N);
  p.traffic = step_account.finish();
  fill_runtime(p, cluster, allocations);
  p.fits = double(p.device_peak) <= p.limit_bytes;
  fill_time(p, run, measured.busy_s(), shape, cfg, cluster, N);
  if (!shape.bare) p.phases = run.phases;
  if (!shape.bare) measured.fill(p);
  fill_uncertainty(p, cfg, cluster, N);
  p.gemm_calls.assign(clock.gemm_calls.begin(), clock.gemm_calls.end());
  return p;
}

std::vector<std::pair<GemmCall, uint64_t>> step_gemm_calls(const GptConfig& model, int batch,
                                                          const StrategyOptions& options) {
  PredictConfig cfg;
  cfg.model = model_shape(model);
  cfg.batch_per_rank = batch;
  cfg.options = options;
  cfg.options.mics_shard_size = 0;  // one rank: no partition to check against the world
  cfg.stack_memory = false;
  return predict(cfg, "ddp", load_cluster("cpu-local")).gemm_calls;
}

FitResult smallest_fitting_world(PredictConfig cfg, const std::string& strategy,
                                 const Cluster& cluster, int max_world) {
  FitResult r;
  r.strategy = strategy;
  const int G = std::max(1, cfg.ranks_per_node);
  // --mics-shard-size P: only worlds of whole partitions exist; others count as not fitting
  const int P = cfg.options.mics_shard_size;
  auto try_world = [&](int n) {
    if (P > 0 && n % P != 0) return Prediction{};
    cfg.world = n;
    cfg.ranks_per_node = n < G ? n : G;
    return predict(cfg, strategy, cluster);
  };
  // Within one node, rank by rank; then whole nodes: doubling, then bisection (memory per
  // rank does not grow with the world: shards only get smaller).
  for (int n = 1; n < G && n <= max_world; ++n) {
    Prediction p = try_world(n);
    if (p.fits) return {strategy, n, p};
  }
  const int max_nodes = max_world / G;
  if (max_nodes < 1) return r;
  int lo = 0, hi = 1;  // nodes: lo does not fit (0 = none tried), hi is the candidate
  Prediction at_hi = try_world(G);
  // Activations are not sharded: where they alone exceed the limit, no world fits.
  if (double(at_hi.at_peak[int(MemCategory::kActivations)]) > at_hi.limit_bytes) return r;
  while (!at_hi.fits && hi < max_nodes) {
    lo = hi;
    hi = std::min(max_nodes, hi * 2);
    at_hi = try_world(hi * G);
  }
  if (!at_hi.fits) return r;
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    Prediction p = try_world(mid * G);
    if (p.fits) {
      hi = mid;
      at_hi = p;
    } else {
      lo = mid;
    }
  }
  return {strategy, hi * G, at_hi};
}

}  // namespace sb
