// run_strategy (see header): train -> agree on the verdict -> aggregate over ranks, with the
// cross-rank scalars on MPI and two step observers: the robustness tests' fault injection and
// the two-host mode's link sampling.
#include "harness/launch/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "harness/common/check.h"
#include "harness/launch/link_counter.h"
#include "harness/predict/predict.h"

namespace sb {
namespace {

// CrossRank over MPI (main thread, communicator idle), counting its calls: the link sampler
// replays as many to measure what the loop's own scalars put on the links.
class MpiCrossRank final : public CrossRank {
 public:
  explicit MpiCrossRank(MpiRuntime& mpi) : mpi_(mpi) {}
  double max(double v) override { return ++calls_, mpi_.max_over_ranks(v); }
  double sum(double v) override { return ++calls_, mpi_.sum_over_ranks(v); }
  uint64_t max_u64(uint64_t v) override { return ++calls_, mpi_.max_over_ranks_u64(v); }
  uint64_t sum_u64(uint64_t v) override { return ++calls_, mpi_.sum_over_ranks_u64(v); }
  void broadcast_string(std::string& s, int root) override { mpi_.broadcast_string(s, root); }
  uint64_t calls() const { return calls_; }

 private:
  MpiRuntime& mpi_;
  uint64_t calls_ = 0;
};

// Deliberate failures for the robustness tests: a crash, a stall, or running out of memory on
// one rank only, mid-step (the asymmetric case): "oom" caps this rank's tracker at what it
// holds, so the step's next allocation goes past the limit as a real one would. Steps count
// across the whole matrix of this process (RunConfig::Fault).
class FaultInjector final : public StepObserver {
 public:
  FaultInjector(const RunConfig::Fault& f, int rank, int* process_step)
      : fault_(f), rank_(rank), process_step_(process_step) {}
  void before_step(int, MemoryTracker& memory) override {
    const int step = (*process_step_)++;
    if (fault_.rank != rank_ || fault_.step != step) return;
    std::fprintf(stderr, "[rank %d] injected fault: %s at step %d\n", rank_, fault_.kind.c_str(),
                 step);
    std::fflush(stderr);
    if (fault_.kind == "exit") std::_Exit(3);
    if (fault_.kind == "hang")
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    if (fault_.kind == "oom") memory.set_limit(std::max<uint64_t>(memory.current_total(), 1));
  }

 private:
  const RunConfig::Fault& fault_;
  int rank_;
  int* process_step_;
};

// [two-host link] what crossed the links in the measured steps; then, alone, the loop's own
// scalar reductions of those steps, replayed (they cross the links too, outside the ledger).
class LinkSampler final : public StepObserver {
 public:
  LinkSampler(MpiRuntime& mpi, const Topology& topo, MpiCrossRank& ranks)
      : mpi_(mpi), topo_(topo), ranks_(ranks) {}
  void measured_begin() override {
    before_ = sample_link(mpi_, topo_);
    calls_before_ = ranks_.calls();
  }
  void measured_end() override {
    const uint64_t loop_calls = ranks_.calls() - calls_before_;
    steps_ = link_traffic(before_, sample_link(mpi_, topo_), mpi_, topo_);
    if (steps_.available)
      harness_ = measure_link(mpi_, topo_, [&] {
        for (uint64_t i = 0; i < loop_calls; ++i) mpi_.max_over_ranks(0.0);
      });
  }
  void fold_into(StrategyRun& run, int steps) const {
    run.link_measured = steps_.available;
    run.link_bytes_measured = steps_.bytes_without_retransmits() / uint64_t(steps);
    run.link_harness_bytes_measured = harness_.bytes_without_retransmits() / uint64_t(steps);
    run.link_retrans_segs = steps_.retrans_segs;
  }

 private:
  MpiRuntime& mpi_;
  const Topology& topo_;
  MpiCrossRank& ranks_;
  LinkSample before_;
  LinkTraffic steps_, harness_;
  uint64_t calls_before_ = 0;
};

// Predicted up front (the predictor dry-runs the strategy): a strategy that cannot fit under
// --mem-limit-gb is skipped with its predicted breakdown instead of being run into the limit.
// Every rank predicts the same, so every rank skips. Empty when it fits.
std::string predicted_oom(const std::string& name, const RunConfig& cfg, const Topology& topo,
                          const Device& device) {
  const Prediction p = predict(predict_config_for(cfg, topo), name,
                               load_cluster(device.is_host() ? "cpu-local" : "h200"), &topo);
  if (p.fits) return {};
  return "out of memory (predicted before running): peak " + std::to_string(p.peak) +
         " bytes per rank exceeds --mem-limit-gb " + std::to_string(cfg.mem_limit_gb) + " (" +
         MemoryTracker::format_breakdown(p.at_peak) + ")";
}

}  // namespace

StrategyRun run_strategy(const std::string& name, const RunConfig& cfg, MpiRuntime& mpi,
                         Communicator& comm, Device& device, bool keep_params) {
  static int process_step = 0;  // RunConfig::Fault counts steps across the matrix
  StrategyRun run;
  run.strategy = name;
  const StrategyEntry* entry = find_strategy(name);
  SB_CHECK(entry != nullptr, "unknown strategy " << name);
  run.description = entry->description;
  const Topology& topo = comm.topology();
  if (cfg.mem_limit_gb > 0) {
    run.error = predicted_oom(name, cfg, topo, device);
    if (!run.error.empty()) {
      run.status = "oom";
      return run;
    }
  }
  MpiCrossRank ranks(mpi);
  FaultInjector faults(cfg.fault, topo.rank(), &process_step);
  LinkSampler link(mpi, topo, ranks);
  TrainContext ctx(comm, device, ranks);
  ctx.observers = {&faults, &link};
  ctx.keep_params = keep_params;
  const Verdict mine = train(*entry, cfg, ctx, run);
  if (!agree_on_verdict(mine, ranks, topo, run)) return run;
  aggregate_over_ranks(ranks, topo, run);
  link.fold_into(run, cfg.steps);
  run.link_overhead_model_bytes =
      mpi.sum_over_ranks_u64(link_overhead_model_bytes(run.step_entries, topo));
  return run;
}

}  // namespace sb
