// Phase marks, per-step phase times, the step's timeline events, and the cross-rank choice of whose
// phases a step reports (see header). Wait and collective intervals come from the Communicator (its
// wait log and the ledger's start_ns/end_ns), so every collective of a traced step is one
// comm-track event and every blocked stretch one wait event.
#include "harness/train/phase_clock.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "harness/train/train_loop.h"

namespace sb {
namespace {

int64_t ns_of(double s) { return std::llround(s * 1e9); }

constexpr const char* kPhaseNames[kNumPhases] = {"forward", "backward", "optimizer", "step end"};

std::string segment_name(const ModelLayout& layout, int segment) {
  if (segment == 0) return "embedding";
  if (segment == layout.num_segments - 1) return "head";
  return "block " + std::to_string(segment - 1);
}

}  // namespace

double StepPhases::overlap_fraction() const {
  if (comm_busy_s <= 0) return 0;
  return std::clamp(1.0 - exposed_comm_s / comm_busy_s, 0.0, 1.0);
}

// Forwards every hook to the strategy and opens a compute-track event whenever the model moves to
// another segment, so a segment's event covers its parameter-free ops (attention, GELU) too.
class PhaseClock::SegmentHooks : public ModelHooks {
 public:
  SegmentHooks(const ModelLayout& layout, const Device& device)
      : layout_(layout), device_(device) {}
  void set(ModelHooks* inner, std::vector<TraceEvent>* out) { inner_ = inner, out_ = out; }
  void close(int64_t now_ns) {
    if (open_ >= 0)
      out_->push_back(TraceEvent{
          std::string(backward_ ? "backward " : "forward ") + segment_name(layout_, open_),
          kComputeTid,
          start_ns_,
          now_ns - start_ns_,
          {}});
    open_ = -1;
  }
  void pre_forward(int m) override {
    enter(m, false);
    inner_->pre_forward(m);
  }
  void post_forward(int m) override { inner_->post_forward(m); }
  void pre_backward(int m) override {
    enter(m, true);
    inner_->pre_backward(m);
  }
  void post_backward(int m) override { inner_->post_backward(m); }
  void pre_recompute(int m) override {  // part of the block's backward on the timeline
    enter(m, true);
    inner_->pre_recompute(m);
  }
  void post_recompute(int m) override { inner_->post_recompute(m); }
  const float* param(int t) override { return inner_->param(t); }
  float* grad(int t) override { return inner_->grad(t); }

 private:
  void enter(int m, bool backward) {
    const int seg = layout_.modules[size_t(m)].segment;
    if (seg == open_ && backward == backward_) return;
    const int64_t now = ns_of(device_.now_s());
    close(now);
    open_ = seg, backward_ = backward, start_ns_ = now;
  }
  const ModelLayout& layout_;
  const Device& device_;
  ModelHooks* inner_ = nullptr;
  std::vector<TraceEvent>* out_ = nullptr;
  int open_ = -1;
  bool backward_ = false;
  int64_t start_ns_ = 0;
};

PhaseClock::PhaseClock(Communicator& comm, const Device& device, const ModelLayout& layout,
                       bool trace)
    : comm_(comm),
      device_(device),
      trace_on_(trace),
      segments_(std::make_unique<SegmentHooks>(layout, device)) {
  comm_.record_waits(trace_on_);
}

PhaseClock::~PhaseClock() { comm_.record_waits(false); }

void PhaseClock::begin_step(bool measured) {
  measured_ = measured;
  marks_[0] = device_.now_s();
  blocked_[0] = comm_.blocked_seconds();
  if (measured_ && origin_ns_ < 0) origin_ns_ = ns_of(marks_[0]);
  comm_.take_waits();  // drop what the previous (unmeasured) work left in the log
}

void PhaseClock::end(Phase p) {
  const int i = int(p) + 1;
  marks_[i] = device_.now_s();
  blocked_[i] = comm_.blocked_seconds();
  if (segments_) segments_->close(ns_of(marks_[i]));
}

ModelHooks& PhaseClock::hooks(ModelHooks& inner) {
  if (!trace_on_ || !measured_ || trace_.truncated) return inner;
  segments_->set(&inner, &pending_);
  return *segments_;
}

double PhaseClock::end_step(const Ledger& ledger, size_t ledger_mark) {
  auto secs = [&](int a, int b) { return marks_[b] - marks_[a]; };
  auto blocked = [&](int a, int b) { return blocked_[b] - blocked_[a]; };
  StepPhases s;
  s.rank = comm_.topology().rank();
  s.step_s = secs(0, kNumPhases);
  s.exposed_comm_s = blocked(0, kNumPhases);
  s.forward_s = secs(0, 1) - blocked(0, 1);
  s.backward_s = secs(1, 2) - blocked(1, 2);
  s.optimizer_s = secs(2, 3) - blocked(2, 3);
  s.other_s = secs(3, 4) - blocked(3, 4);
  const auto& all = ledger.entries();
  for (size_t i = ledger_mark; i < all.size(); ++i) s.comm_busy_s += all[i].time_s;
  if (measured_) {
    steps_.push_back(s);
    if (trace_on_ && !trace_.truncated) trace_step(s, ledger, ledger_mark);
  }
  pending_.clear();
  return s.step_s;
}

void PhaseClock::trace_step(const StepPhases& p, const Ledger& ledger, size_t ledger_mark) {
  const int step = int(steps_.size()) - 1;
  std::vector<TraceEvent> ev;
  ev.push_back({"step " + std::to_string(step),
                kComputeTid,
                ns_of(marks_[0]),
                ns_of(marks_[kNumPhases]) - ns_of(marks_[0]),
                {{"step", step},
                 {"step_s", p.step_s},
                 {"exposed_comm_s", p.exposed_comm_s},
                 {"comm_busy_s", p.comm_busy_s}}});
  for (int i = 0; i < kNumPhases; ++i)
    ev.push_back({kPhaseNames[i],
                  kComputeTid,
                  ns_of(marks_[i]),
                  ns_of(marks_[i + 1]) - ns_of(marks_[i]),
                  {{"step", step}}});
  for (TraceEvent& e : pending_) {
    e.args = {{"step", step}};
    ev.push_back(std::move(e));
  }
  std::map<uint64_t, const LedgerEntry*> by_seq;
  const auto& all = ledger.entries();
  for (size_t i = ledger_mark; i < all.size(); ++i) {
    const LedgerEntry& e = all[i];
    by_seq[e.seq] = &e;
    ev.push_back({coll_name(e.kind),
                  e.stream ? kCommSideTid : kCommTid,
                  e.start_ns,
                  e.end_ns - e.start_ns,
                  {{"step", step},
                   {"seq", e.seq},
                   {"kind", coll_name(e.kind)},
                   {"group", group_name(e.group)},
                   {"group_size", e.group_size},
                   {"bytes", e.payload_bytes},
                   {"dtype", dtype_name(e.dtype)},
                   {"sent_intra_bytes", e.sent.intra},
                   {"sent_inter_bytes", e.sent.inter},
                   {"tag", e.tag}}});
  }
  for (const CommWait& w : comm_.take_waits()) {
    nlohmann::json args = {{"step", step}};
    std::string name = "wait (end of step)";
    if (w.seq != CommWait::kAllOps) {
      args["seq"] = w.seq;
      const auto it = by_seq.find(w.seq);
      name = "wait " + std::string(it != by_seq.end() ? coll_name(it->second->kind) : "?");
      if (it != by_seq.end()) args["tag"] = it->second->tag;
    }
    ev.push_back({name, kComputeTid, w.begin_ns, w.end_ns - w.begin_ns, std::move(args)});
  }
  if (trace_.events.size() + ev.size() > kMaxTraceEventsPerRank) {
    trace_.truncated = true;
    return;
  }
  for (TraceEvent& e : ev) {
    e.ts_ns -= origin_ns_;
    trace_.events.push_back(std::move(e));
  }
  trace_.steps.push_back(step);
}

std::vector<StepPhases> slowest_rank_phases(const std::vector<StepPhases>& local,
                                            CrossRank& ranks, const Topology& topo) {
  const int N = topo.world_size(), rank = topo.rank();
  std::vector<StepPhases> out(local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    const StepPhases& s = local[i];
    // The lowest rank holding the maximum step time reports its phases.
    const double slowest = ranks.max(s.step_s);
    const int holder = N - int(ranks.max(s.step_s == slowest ? double(N - rank) : 0.0));
    const bool mine = holder == rank;
    std::vector<double> v = {s.forward_s, s.backward_s, s.optimizer_s, s.exposed_comm_s,
                             s.other_s,   s.step_s,     s.comm_busy_s};
    // Divided by the number of holders: 1 over MPI, every rank in the dry run's symmetric
    // world (where each rank holds the same values as this one).
    const double holders = ranks.sum(mine ? 1.0 : 0.0);
    for (double& x : v) x = ranks.sum(mine ? x : 0.0) / holders;
    out[i] = StepPhases{v[0], v[1], v[2], v[3], v[4], v[5], v[6], holder};
  }
  return out;
}

}  // namespace sb
