// Step loop, timers and cross-rank aggregation (see header). Collectives of the strategy go
// through the Communicator; the few scalars aggregated here go through MpiRuntime on the main
// thread while the comm thread is idle (after Communicator::synchronize).
#include "harness/run/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "harness/common/check.h"
#include "harness/model/data.h"
#include "harness/model/gpt.h"
#include "harness/predict/predict.h"
#include "harness/run/link_counter.h"

namespace sb {
namespace {

// Deliberate failures for the robustness tests: a crash, a stall, or running out of memory on
// one rank only, mid-step (the asymmetric case): "oom" caps this rank's tracker at what it
// holds, so the step's next allocation goes past the limit as a real one would.
void maybe_inject_fault(const RunConfig::Fault& f, int rank, MemoryTracker& memory) {
  static int global_step = 0;
  const int step = global_step++;
  if (f.rank != rank || f.step != step) return;
  std::fprintf(stderr, "[rank %d] injected fault: %s at step %d\n", rank, f.kind.c_str(), step);
  std::fflush(stderr);
  if (f.kind == "exit") std::_Exit(3);
  if (f.kind == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  if (f.kind == "oom") memory.set_limit(std::max<uint64_t>(memory.current_total(), 1));
}

// Every rank learns whether any rank went past its memory limit (deferred in the tracker), at
// a point all reach with no collective in flight; then all throw together, each with its own
// message or none.
void throw_if_any_rank_over_limit(MpiRuntime& mpi, const MemoryTracker& memory) {
  if (mpi.max_over_ranks(memory.over_limit() ? 1.0 : 0.0) > 0)
    throw OutOfMemory(memory.over_limit_message());
}

// The device's matmul precision for one strategy's run: bf16-mixed asks for bf16 matmuls
// (honoured by the CUDA device; the CPU device keeps fp32), with the operand copies counted in
// this run's tracker; back to fp32 (releasing them) before the tracker goes.
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

}  // namespace

MatmulPrecision matmul_precision_for(Precision p) {
  return p == Precision::kBf16Mixed ? MatmulPrecision::kBf16 : MatmulPrecision::kFp32;
}

double param_checksum(const std::vector<float>& params) {
  double s = 0;
  for (size_t i = 0; i < params.size(); ++i) s += double(params[i]) * double(1 + i % 7);
  return params.empty() ? 0 : s / double(params.size());
}

StrategyRun run_strategy(const std::string& name, const RunConfig& cfg, MpiRuntime& mpi,
                         Communicator& comm, Device& device, bool keep_params) {
  StrategyRun run;
  run.strategy = name;
  const StrategyEntry* entry = find_strategy(name);
  SB_CHECK(entry != nullptr, "unknown strategy " << name);
  run.description = entry->description;
  const Topology& topo = comm.topology();
  const int N = topo.world_size(), rank = topo.rank(), b = cfg.batch_per_rank;
  const int T = cfg.model.seq_len;

  device.trim_memory();  // the previous strategy's cached blocks go back to the driver
  run.device_before = device.memory_info();
  MemoryTracker memory(device.allocator());
  if (cfg.mem_limit_gb > 0) memory.set_limit(uint64_t(cfg.mem_limit_gb * (1ull << 30)));
  memory.defer_limit_failures(true);  // see throw_if_any_rank_over_limit
  const MatmulPrecisionScope matmul(device, cfg.options.precision, memory);
  const ModelLayout layout = make_layout(cfg.model);
  std::unique_ptr<GptModel> model;
  std::unique_ptr<Strategy> strategy;
  std::vector<int> tokens(size_t(b) * T), targets(size_t(b) * T);
  int failed = 0;  // 0 ok, 1 oom, 2 error
  LinkSample link_before;                // [two-host link] before the first measured step
  LinkTraffic link_steps, link_harness;  // [two-host link] measured steps; the loop's own scalars
  PhaseClock clock(comm, layout, cfg.trace);  // per-phase time and the --trace timeline
  if (cfg.mem_limit_gb > 0) {
    // Predicted up front (the predictor replays the strategy's allocations): a strategy that
    // cannot fit is skipped with its predicted breakdown instead of being run into the limit.
    // Every rank predicts the same, so every rank skips.
    PredictConfig pc;
    pc.model = model_shape(cfg.model);
    pc.world = N;
    pc.ranks_per_node = topo.ranks_per_node();
    pc.batch_per_rank = b;
    pc.options = cfg.options;
    pc.mem_limit_gb = cfg.mem_limit_gb;
    const Prediction p =
        predict(pc, name, load_cluster(device.is_host() ? "cpu-local" : "h200"), &topo);
    if (!p.fits) {
      run.status = "oom";
      run.error = "out of memory (predicted before running): peak " + std::to_string(p.peak) +
                  " bytes per rank exceeds --mem-limit-gb " + std::to_string(cfg.mem_limit_gb) +
                  " (" + MemoryTracker::format_breakdown(p.at_peak) + ")";
      return run;
    }
  }
  try {
    model = std::make_unique<GptModel>(cfg.model, b, device, memory);
    strategy = entry->make(StrategyContext{layout, comm, device, memory, cfg.options});
    strategy->setup();
    comm.synchronize();
    throw_if_any_rank_over_limit(mpi, memory);
    run.padded_params = strategy->padded_params();
    const int total = cfg.warmup + cfg.steps;
    for (int step = 0; step < total; ++step) {
      if (step == cfg.warmup) {
        memory.reset_peak();  // peak of the steady state, setup excluded
        device.synchronize();
        device.reset_memory_peak();
        link_before = sample_link(mpi, topo);  // [two-host link]
      }
      // Rank r of N takes global samples [step*N*b + r*b, +b): every world size sees the
      // same global batch, so a 1-rank run computes the same step.
      make_batch(cfg.options.seed, uint64_t(step) * N * b + uint64_t(rank) * b, b, T,
                 cfg.model.vocab, tokens.data(), targets.data());
      maybe_inject_fault(cfg.fault, rank, memory);
      const size_t ledger_mark = comm.ledger().size();
      comm.reset_blocked_seconds();
      clock.begin_step(step >= cfg.warmup);
      strategy->begin_step();
      const float loss = model->forward(tokens.data(), targets.data(), clock.hooks(*strategy));
      clock.end(Phase::kForward);
      model->backward(clock.hooks(*strategy));
      strategy->finish_backward();
      clock.end(Phase::kBackward);
      strategy->optimizer_step(step + 1);
      clock.end(Phase::kOptimizer);
      comm.synchronize();
      device.synchronize();
      clock.end(Phase::kStepEnd);
      const double local_time = clock.end_step(comm.ledger(), ledger_mark);
      const double local_exposed = comm.blocked_seconds();
      throw_if_any_rank_over_limit(mpi, memory);
      run.loss.push_back(mpi.sum_over_ranks(double(loss)) / N);
      const double step_time = mpi.max_over_ranks(local_time);
      const double exposed = mpi.max_over_ranks(local_exposed);
      if (step >= cfg.warmup) {
        run.step_time_s.push_back(step_time);
        run.exposed_s.push_back(exposed);
        const auto& all = comm.ledger().entries();
        run.step_entries.assign(all.begin() + long(ledger_mark), all.end());
      }
    }
    // [two-host link] what crossed the links in the measured steps; then, alone, the loop's own
    // per-step scalar reductions (they cross the links too, outside the ledger)
    link_steps = link_traffic(link_before, sample_link(mpi, topo), mpi, topo);
    if (link_steps.available)
      link_harness = measure_link(mpi, topo, [&] {
        for (int s = 0; s < cfg.steps; ++s) {  // as in the loop: limit, loss, step, exposed
          mpi.max_over_ranks(0.0);
          mpi.sum_over_ranks(0.0);
          mpi.max_over_ranks(0.0);
          mpi.max_over_ranks(0.0);
        }
      });
    run.phases = slowest_rank_phases(clock.local_steps(), mpi);  // after the link's sample
    run.trace = clock.take_trace();
    run.model_state_params = memory.current(MemCategory::kParams);
    run.model_state_grads = memory.current(MemCategory::kGrads);
    run.model_state_optimizer = memory.current(MemCategory::kOptimizer);
    run.peak_bytes = memory.peak_total();
    run.device_after = device.memory_info();
    run.breakdown_at_peak = memory.breakdown_at_peak();
    std::vector<float> params = strategy->gather_full_params();
    comm.synchronize();
    run.param_checksum = param_checksum(params);
    if (keep_params) run.params = std::move(params);
  } catch (const OutOfMemory& e) {
    failed = 1;
    run.error = e.what();
  } catch (const std::exception& e) {
    failed = 2;
    run.error = e.what();
  }
  // In-flight collectives may still read buffers of the strategy: finish them first.
  comm.synchronize();
  strategy.reset();
  model.reset();
  comm.ledger().clear();

  // Agree on the verdict: one failing rank fails the strategy everywhere.
  const int worst = int(mpi.max_over_ranks(double(failed)));
  if (worst != 0) {
    run.status = worst == 1 ? "oom" : "error";
    // The message of the lowest rank that has one (a rank over its limit, not those that
    // merely stopped with it).
    const bool has_message = failed != 0 && !run.error.empty();
    const int source = N - int(mpi.max_over_ranks(has_message ? double(N - rank) : 0.0));
    std::string msg = source < N ? run.error : std::string("failed (see the ranks' logs)");
    if (source < N) {
      mpi.broadcast_string(msg, source);
      if (N > 1) msg = "rank " + std::to_string(source) + ": " + msg;
    }
    run.error = msg;
    run.step_time_s.clear();
    run.step_entries.clear();
    return run;
  }

  // Cross-rank aggregates of one step's traffic and of memory.
  for (const LedgerEntry& e : run.step_entries) {
    run.payload_bytes += e.payload_bytes;
    run.sent_local.intra += e.sent.intra;
    run.sent_local.inter += e.sent.inter;
    run.traffic_counted = run.traffic_counted && e.counted;
  }
  run.sent_intra_all = mpi.sum_over_ranks_u64(run.sent_local.intra);
  run.sent_inter_all = mpi.sum_over_ranks_u64(run.sent_local.inter);
  run.sent_max_rank = mpi.max_over_ranks_u64(run.sent_local.total());
  const uint64_t max_peak = mpi.max_over_ranks_u64(run.peak_bytes);
  // The breakdown reported is that of the lowest rank holding the maximum peak.
  const double holder = mpi.max_over_ranks(run.peak_bytes == max_peak ? double(N - rank) : 0.0);
  const int holder_rank = N - int(holder);
  for (int c = 0; c < kNumMemCategories; ++c) {
    const uint64_t mine = rank == holder_rank ? run.breakdown_at_peak[c] : 0;
    run.breakdown_at_peak[c] = mpi.sum_over_ranks_u64(mine);
  }
  run.peak_bytes = max_peak;
  run.model_state_params = mpi.max_over_ranks_u64(run.model_state_params);
  run.model_state_grads = mpi.max_over_ranks_u64(run.model_state_grads);
  run.model_state_optimizer = mpi.max_over_ranks_u64(run.model_state_optimizer);
  run.rss_hwm_bytes = mpi.max_over_ranks_u64(MemoryTracker::rss_hwm_bytes());
  // What the report shows of the device's memory (report.cc), max over ranks.
  run.device_before.driver_used_bytes = mpi.max_over_ranks_u64(run.device_before.driver_used_bytes);
  for (uint64_t* v : {&run.device_after.reserved_bytes, &run.device_after.peak_reserved_bytes,
                      &run.device_after.driver_used_bytes})
    *v = mpi.max_over_ranks_u64(*v);
  // [two-host link] per measured step: what crossed the links, the loop's share, the model
  run.link_measured = link_steps.available;
  run.link_bytes_measured = link_steps.bytes_without_retransmits() / uint64_t(cfg.steps);
  run.link_harness_bytes_measured = link_harness.bytes_without_retransmits() / uint64_t(cfg.steps);
  run.link_retrans_segs = link_steps.retrans_segs;
  run.link_overhead_model_bytes =
      mpi.sum_over_ranks_u64(link_overhead_model_bytes(run.step_entries, topo));
  return run;
}

}  // namespace sb
