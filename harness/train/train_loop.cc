// The step loop (see header): setup, warm-up and measured steps of one strategy, then the
// agreement on the verdict and the cross-rank aggregates. Collectives of the strategy go
// through the Communicator; the loop's own scalars through CrossRank on the main thread while
// the communicator is idle (after Communicator::synchronize).
#include "harness/train/train_loop.h"

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "harness/common/check.h"
#include "harness/memory/page_faults.h"
#include "harness/model/data.h"
#include "harness/model/gpt.h"

namespace sb {
namespace {

// Every rank learns whether any rank went past its memory limit (deferred in the tracker), at
// a point all reach with no collective in flight; then all throw together, each with its own
// message or none.
void throw_if_any_rank_over_limit(CrossRank& ranks, const MemoryTracker& memory) {
  if (ranks.max(memory.over_limit() ? 1.0 : 0.0) > 0) throw OutOfMemory(memory.over_limit_message());
}

// The device's matmul precision for one strategy's run: bf16-mixed asks for bf16 matmuls
// (honoured by the CUDA device and by the simulated device of a GPU cluster), with the operand
// copies counted in this run's tracker; back to fp32 (releasing them) before the tracker goes.
class MatmulPrecisionScope {
 public:
  MatmulPrecisionScope(Device& d, Precision p, MemoryTracker& memory) : device_(d) {
    device_.set_matmul_precision(matmul_precision_for(p), &memory);
  }
  ~MatmulPrecisionScope() { device_.set_matmul_precision(MatmulPrecision::kFp32, nullptr); }
  MatmulPrecisionScope(const MatmulPrecisionScope&) = delete;
  MatmulPrecisionScope& operator=(const MatmulPrecisionScope&) = delete;

 private:
  Device& device_;
};

class GptWorkload final : public Workload {
 public:
  GptWorkload(const RunConfig& cfg, Device& d, MemoryTracker& m)
      : model_(cfg.model, cfg.batch_per_rank, d, m,
               cfg.options.precision == Precision::kBf16Mixed) {}
  float forward(const int* tokens, const int* targets, ModelHooks& h) override {
    return model_.forward(tokens, targets, h);
  }
  void backward(ModelHooks& h) override { model_.backward(h); }

 private:
  GptModel model_;
};

// One training step of this rank: K = grad_accum micro-batches (`batch(k)` makes micro-batch
// k), then one optimizer step, its phases marked on `clock`; returns the mean of its local
// micro-batch losses.
float one_step(Workload& model, Strategy& strategy, int step, int K,
               const std::vector<int>& tokens, const std::vector<int>& targets,
               const std::function<void(int)>& batch, PhaseClock& clock) {
  strategy.begin_step();
  float loss = 0;
  for (int k = 0; k < K; ++k) {
    if (k > 0) batch(k);
    if (K > 1) strategy.begin_micro_step(k == K - 1);
    loss += model.forward(tokens.data(), targets.data(), clock.hooks(strategy)) / float(K);
    clock.end(Phase::kForward);
    model.backward(clock.hooks(strategy));
    strategy.finish_backward();  // this micro-batch's reductions, if it issued any, complete
    clock.end(Phase::kBackward);
  }
  strategy.optimizer_step(step + 1);
  clock.end(Phase::kOptimizer);
  return loss;
}

// Warm-up + measured steps: losses, step times and exposed communication, reduced over ranks.
void run_steps(Workload& model, Strategy& strategy, const RunConfig& cfg, TrainContext& ctx,
               const ModelLayout& layout, MemoryTracker& memory, StrategyRun& run) {
  Communicator& comm = ctx.comm;
  PhaseClock clock(comm, ctx.device, layout, cfg.trace);  // per-phase time, --trace timeline
  const Topology& topo = comm.topology();
  const int N = topo.world_size(), b = cfg.batch_per_rank, T = cfg.model.seq_len;
  std::vector<int> tokens(size_t(b) * T), targets(size_t(b) * T);
  CacheStats cache_before;
  for (int step = 0; step < cfg.warmup + cfg.steps; ++step) {
    if (step == cfg.warmup) {
      memory.reset_peak();  // peak of the steady state, setup excluded
      ctx.device.synchronize();
      ctx.device.reset_memory_peak();
      cache_before = ctx.device.allocator_stats();
      for (StepObserver* o : ctx.observers) o->measured_begin();
    }
    // Rank r of N takes global samples [s*N*b + r*b, +b) for micro-batch s = step*K + k: every
    // world size sees the same global batch of N*b*K, so a 1-rank run computes the same step.
    const int K = cfg.options.grad_accum;
    const auto batch = [&](int k) {
      make_batch(cfg.options.seed, first_sample_of(uint64_t(step) * K + k, N, topo.rank(), b), b,
                 T, cfg.model.vocab, tokens.data(), targets.data());
    };
    batch(0);
    for (StepObserver* o : ctx.observers) o->before_step(step, memory);
    const size_t ledger_mark = comm.ledger().size();
    comm.reset_blocked_seconds();
    const PageFaults faults_before = process_page_faults();
    const double t0 = ctx.device.now_s();
    clock.begin_step(step >= cfg.warmup);
    const float loss = one_step(model, strategy, step, K, tokens, targets, batch, clock);
    comm.synchronize();
    ctx.device.synchronize();
    const PageFaults faults_after = process_page_faults();
    if (cfg.inject_slowdown > 0)  // hidden test flag: a real, proportional slowdown
      std::this_thread::sleep_for(
          std::chrono::duration<double>(cfg.inject_slowdown * (ctx.device.now_s() - t0)));
    clock.end(Phase::kStepEnd);
    const double local_time = clock.end_step(comm.ledger(), ledger_mark);
    const double local_exposed = comm.blocked_seconds();
    throw_if_any_rank_over_limit(ctx.ranks, memory);
    run.loss.push_back(ctx.ranks.sum(double(loss)) / N);
    const double step_time = ctx.ranks.max(local_time);
    const double exposed = ctx.ranks.max(local_exposed);
    if (step >= cfg.warmup) {
      run.step_time_s.push_back(step_time);
      run.exposed_s.push_back(exposed);
      run.minor_faults.push_back(faults_after.minor - faults_before.minor);
      run.major_faults.push_back(faults_after.major - faults_before.major);
      const auto& all = comm.ledger().entries();
      run.step_entries.assign(all.begin() + long(ledger_mark), all.end());
    }
  }
  for (StepObserver* o : ctx.observers) o->measured_end();
  run.allocator = ctx.device.allocator_stats();
  run.measured_hits = run.allocator.hits - cache_before.hits;
  run.measured_misses = run.allocator.misses - cache_before.misses;
  run.measured_backing_frees = run.allocator.backing_frees - cache_before.backing_frees;
  run.phases = slowest_rank_phases(clock.local_steps(), ctx.ranks, comm.topology());
  run.trace = clock.take_trace();
}

// Model state at rest, the peak window's figures and the final parameters' checksum.
void record_memory_and_params(Strategy& strategy, TrainContext& ctx, MemoryTracker& memory,
                              StrategyRun& run) {
  run.model_state_params = memory.current(MemCategory::kParams);
  run.model_state_grads = memory.current(MemCategory::kGrads);
  run.model_state_optimizer = memory.current(MemCategory::kOptimizer);
  run.peak_bytes = memory.peak_total();
  run.device_after = ctx.device.memory_info();
  run.breakdown_at_peak = memory.breakdown_at_peak();
  run.held_peak_bytes = memory.held_peak_total();
  run.held_breakdown_at_peak = memory.held_breakdown_at_peak();
  if (!ctx.gather_params) return;
  std::vector<float> params = strategy.gather_full_params();
  ctx.comm.synchronize();
  run.param_checksum = param_checksum(params);
  if (ctx.keep_params) run.params = std::move(params);
}

}  // namespace

// What a bf16-mixed stack holds (tracker.h's Held): the residual stream is bf16 wherever the
// model computes with bf16 parameters — FSDP's MixedPrecision(param_dtype=bf16)
// (torch/distributed/fsdp/_flat_param.py FlatParamHandle._use_low_precision_shard), FSDP2's
// MixedPrecisionPolicy (torch/distributed/fsdp/_fully_shard/_fsdp_param.py
// FSDPParam.init_dtype_attrs, init_all_gather_outputs), DeepSpeed's bf16 engine
// (deepspeed/runtime/engine.py DeepSpeedEngine._configure_distributed_model casts the module's
// parameters, _cast_module_mixed_precision) — and fp32 under DDP's autocast.
HeldPolicy held_policy(const StrategyDescription& d, const StrategyOptions& o) {
  HeldPolicy p;
  p.bf16 = o.precision == Precision::kBf16Mixed;
  p.stream_bf16 = p.bf16 && (d.family != "ddp" || o.ddp.bf16_params);
  return p;
}

MatmulPrecision matmul_precision_for(Precision p) {
  return p == Precision::kBf16Mixed ? MatmulPrecision::kBf16 : MatmulPrecision::kFp32;
}

double param_checksum(const std::vector<float>& params) {
  double s = 0;
  for (size_t i = 0; i < params.size(); ++i) s += double(params[i]) * double(1 + i % 7);
  return params.empty() ? 0 : s / double(params.size());
}

Verdict train(const StrategyEntry& entry, const RunConfig& cfg, TrainContext& ctx,
              StrategyRun& run) {
  Device& device = ctx.device;
  device.trim_memory();  // the previous strategy's cached blocks go back to the driver
  run.device_before = device.memory_info();
  MemoryTracker memory(device.allocator());
  if (cfg.mem_limit_gb > 0) memory.set_limit(uint64_t(cfg.mem_limit_gb * (1ull << 30)));
  memory.defer_limit_failures(true);  // see throw_if_any_rank_over_limit
  memory.set_held_policy(held_policy(entry.description, cfg.options));
  const MatmulPrecisionScope matmul(device, cfg.options.precision, memory);
  const ModelLayout own_layout = ctx.layout ? ModelLayout{} : make_layout(cfg.model);
  const ModelLayout& layout = ctx.layout ? *ctx.layout : own_layout;
  std::unique_ptr<Workload> model;
  std::unique_ptr<Strategy> strategy;
  Verdict verdict = Verdict::kOk;
  try {
    model = ctx.workload ? ctx.workload(cfg, device, memory)
                         : std::make_unique<GptWorkload>(cfg, device, memory);
    strategy = entry.make(StrategyContext{layout, ctx.comm, device, memory, cfg.options});
    strategy->setup();
    ctx.comm.synchronize();
    throw_if_any_rank_over_limit(ctx.ranks, memory);
    run.padded_params = strategy->padded_params();
    run_steps(*model, *strategy, cfg, ctx, layout, memory, run);
    record_memory_and_params(*strategy, ctx, memory, run);
  } catch (const OutOfMemory& e) {
    verdict = Verdict::kOom;
    run.error = e.what();
  } catch (const std::exception& e) {
    verdict = Verdict::kError;
    run.error = e.what();
  }
  // In-flight collectives may still read buffers of the strategy: finish them first.
  ctx.comm.synchronize();
  strategy.reset();
  model.reset();
  ctx.comm.ledger().clear();
  return verdict;
}

bool agree_on_verdict(Verdict mine, CrossRank& ranks, const Topology& topo, StrategyRun& run) {
  const int N = topo.world_size(), rank = topo.rank();
  const int worst = int(ranks.max(double(int(mine))));
  if (worst == int(Verdict::kOk)) return true;
  run.status = worst == int(Verdict::kOom) ? "oom" : "error";
  // The message of the lowest rank that has one (a rank over its limit, not those that
  // merely stopped with it).
  const bool has_message = mine != Verdict::kOk && !run.error.empty();
  const int source = N - int(ranks.max(has_message ? double(N - rank) : 0.0));
  std::string msg = source < N ? run.error : std::string("failed (see the ranks' logs)");
  if (source < N) {
    ranks.broadcast_string(msg, source);
    if (N > 1) msg = "rank " + std::to_string(source) + ": " + msg;
  }
  run.error = msg;
  run.step_time_s.clear();
  run.step_entries.clear();
  run.minor_faults.clear();
  run.major_faults.clear();
  run.phases.clear();
  run.trace = RankTrace{};
  return false;
}

void aggregate_over_ranks(CrossRank& ranks, const Topology& topo, StrategyRun& run) {
  const int N = topo.world_size(), rank = topo.rank();
  for (const LedgerEntry& e : run.step_entries) {
    run.payload_bytes += e.payload_bytes;
    run.sent_local.intra += e.sent.intra;
    run.sent_local.inter += e.sent.inter;
    run.traffic_counted = run.traffic_counted && e.counted;
  }
  run.sent_intra_all = ranks.sum_u64(run.sent_local.intra);
  run.sent_inter_all = ranks.sum_u64(run.sent_local.inter);
  run.sent_max_rank = ranks.max_u64(run.sent_local.total());
  const uint64_t max_peak = ranks.max_u64(run.peak_bytes);
  // The breakdown reported is that of the lowest rank holding the maximum peak.
  const double holder = ranks.max(run.peak_bytes == max_peak ? double(N - rank) : 0.0);
  const int holder_rank = N - int(holder);
  for (int c = 0; c < kNumMemCategories; ++c) {
    const uint64_t mine = rank == holder_rank ? run.breakdown_at_peak[c] : 0;
    run.breakdown_at_peak[c] = ranks.sum_u64(mine);
  }
  run.peak_bytes = max_peak;
  run.model_state_params = ranks.max_u64(run.model_state_params);
  run.model_state_grads = ranks.max_u64(run.model_state_grads);
  run.model_state_optimizer = ranks.max_u64(run.model_state_optimizer);
  run.rss_hwm_bytes = ranks.max_u64(MemoryTracker::rss_hwm_bytes());
  for (std::vector<uint64_t>* v : {&run.minor_faults, &run.major_faults})
    for (uint64_t& f : *v) f = ranks.max_u64(f);
  for (uint64_t* v : {&run.allocator.reserved_bytes, &run.allocator.allocated_bytes,
                      &run.allocator.peak_reserved_bytes})
    *v = ranks.max_u64(*v);
  for (uint64_t* v : {&run.measured_hits, &run.measured_misses, &run.measured_backing_frees})
    *v = ranks.sum_u64(*v);
  // What the report shows of the device's memory (report.cc), max over ranks.
  run.device_before.driver_used_bytes = ranks.max_u64(run.device_before.driver_used_bytes);
  for (uint64_t* v : {&run.device_after.reserved_bytes, &run.device_after.peak_reserved_bytes,
                      &run.device_after.driver_used_bytes})
    *v = ranks.max_u64(*v);
}

}  // namespace sb
