// Where a step's time went on this rank: forward, backward, optimizer, the communication the
// compute thread waited for (exposed), the comm thread's busy time, and, with --trace, the step's
// timeline (compute and comm tracks) for a Chrome/Perfetto trace. It reads the device's clock (the
// wall clock, or the predictor's logical clock in a dry run) and the ledger; it runs nothing and
// decides nothing, and links no MPI. Gathering and writing: harness/launch/trace.h.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/device/device.h"
#include "harness/model/gpt.h"
#include "harness/model/layout.h"

namespace sb {

class CrossRank;  // harness/train/train_loop.h

// The compute thread's step, in order; each ends where the next begins, so they partition it.
enum class Phase { kForward, kBackward, kOptimizer, kStepEnd };
constexpr int kNumPhases = 4;

// One step on one rank, seconds. forward/backward/optimizer exclude the time blocked on
// communication inside them (that is exposed_comm_s); other_s is the end of the step past the final
// wait (device synchronize, loop overhead). forward + backward + optimizer + exposed_comm + other
// == step_s, by construction of the marks.
struct StepPhases {
  double forward_s = 0, backward_s = 0, optimizer_s = 0, exposed_comm_s = 0, other_s = 0;
  double step_s = 0;
  double comm_busy_s = 0;  // Σ LedgerEntry::time_s of the step: the comm threads' busy time
                           // (both streams summed)
  int rank = 0;            // whose phases these are (after aggregation: the slowest rank's)
  // Share of the comm thread's busy time hidden behind compute, in [0, 1] (0 if no comm).
  double overlap_fraction() const;
};

// One Chrome trace-event "X" (complete) event of this rank; ts relative to the rank's first
// measured step.
struct TraceEvent {
  std::string name;
  int tid = 0;  // kComputeTid | kCommTid | kCommSideTid
  int64_t ts_ns = 0, dur_ns = 0;
  nlohmann::json args;
};
// kCommSideTid: the side comm stream's collectives (CommStream::kSide), a track of their own
// because they overlap the main stream's.
constexpr int kComputeTid = 1, kCommTid = 2, kCommSideTid = 3;
// Bound on a trace's size: at most this many events per rank, whole steps only (a step that would
// pass it and every later one are left out; the trace says which steps it holds).
constexpr size_t kMaxTraceEventsPerRank = 20000;

struct RankTrace {
  std::vector<TraceEvent> events;
  std::vector<int> steps;  // measured steps held (0-based)
  bool truncated = false;
};

class PhaseClock {
 public:
  // trace: also build the timeline (turns on the communicator's wait log while alive). Marks are
  // read on device.now_s(), the clock the communicator's ledger and wait log use too.
  PhaseClock(Communicator& comm, const Device& device, const ModelLayout& layout, bool trace);
  ~PhaseClock();
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;

  void begin_step(bool measured);
  void end(Phase p);  // marks the end of phase p (and the start of the next)
  // After end(kStepEnd) and comm.synchronize(): this rank's step seconds (the sum of its phases);
  // records the step's phases and, if tracing, its events from the ledger's entries [ledger_mark,
  // end).
  double end_step(const Ledger& ledger, size_t ledger_mark);
  // The model's hooks for this step: `inner` itself, or a wrapper that times each segment
  // (embedding, block i, head) when tracing.
  ModelHooks& hooks(ModelHooks& inner);

  const std::vector<StepPhases>& local_steps() const { return steps_; }
  RankTrace take_trace() { return std::move(trace_); }

 private:
  class SegmentHooks;
  void trace_step(const StepPhases& p, const Ledger& ledger, size_t ledger_mark);
  Communicator& comm_;
  const Device& device_;
  bool trace_on_;
  bool measured_ = false;
  double marks_[kNumPhases + 1] = {};  // device clock, seconds
  double blocked_[kNumPhases + 1] = {};
  int64_t origin_ns_ = -1;  // the first measured step's start
  std::vector<StepPhases> steps_;
  RankTrace trace_;
  std::vector<TraceEvent> pending_;  // this step's segment events (absolute ns)
  std::unique_ptr<SegmentHooks> segments_;
};

// Per measured step, the phases of the rank that set the step time (the slowest: its step_s equals
// the reported max over ranks). Collective over the ranks; call with no comm in flight.
std::vector<StepPhases> slowest_rank_phases(const std::vector<StepPhases>& local,
                                            CrossRank& ranks, const Topology& topo);

}  // namespace sb
