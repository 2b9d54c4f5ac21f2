// Walk of ZeRO-3, hook for hook as strategies/zero3.cc: every tensor padded to N on its own;
// before each module its non-persistent tensors are all-gathered, and (with overlap) the
// modules ahead in execution order while the window stays within --prefetch-elements; freed
// after the module. Full grads live from first use to their bucket's flush, which stages N
// blocks and reduce-scatters once. Persistent tensors (< --persist-elements) stay whole and
// are all-gathered once after the step.
#include <deque>
#include <vector>

#include "harness/predict/walk.h"

namespace sb {
namespace {

class Zero3Walk final : public StrategyWalk {
 public:
  using StrategyWalk::StrategyWalk;

  void setup() override {
    const ModelLayout& l = env_.shape.layout;
    n_ = env_.world;
    const size_t nt = l.tensors.size();
    padded_.resize(nt);
    persistent_.resize(nt);
    full_.assign(nt, false);
    grad_full_.assign(nt, false);
    for (size_t t = 0; t < nt; ++t) {
      padded_[t] = round_up(l.tensors[t].numel, uint64_t(n_));
      persistent_[t] = l.tensors[t].numel < env_.opt.persist_elements;
      const uint64_t part = padded_[t] / uint64_t(n_);
      env_.alloc_state(part, part, part);
      if (persistent_[t]) env_.mem.alloc(MemCategory::kParams, env_.bp() * padded_[t]);
    }
    const int M = int(l.modules.size());
    for (int m = 0; m < M; ++m) exec_.push_back(m);
    for (int m = M - 1; m >= 0; --m) exec_.push_back(m);
    window_.resize(size_t(M), 0);
    for (int m = 0; m < M; ++m)
      for (int t : l.modules[m].tensors)
        if (!persistent_[t]) window_[m] += padded_[t];
  }

  void begin_step() override { cursor_ = 0; }
  void pre_forward(int m) override { fetch(m); }
  void pre_backward(int m) override { fetch(m); }
  void post_forward(int m) override { release(m); }

  void post_backward(int m) override {
    release(m);
    for (int t : env_.shape.ready_at[m]) {
      bucket_.push_back(t);
      bucket_elems_ += padded_[t];
      if (bucket_elems_ >= env_.opt.bucket_elements()) flush_bucket();
    }
  }

  void grad_storage(int t) override {
    if (grad_full_[t]) return;
    grad_full_[t] = true;
    env_.mem.alloc(MemCategory::kCommBuffers, env_.bg() * padded_[t]);
  }

  void finish_backward() override {
    flush_bucket();
    reap(true);
  }

  void optimizer_step() override {
    for (uint64_t p : padded_) env_.optimizer_shard(p / uint64_t(n_));
    for (size_t t = 0; t < padded_.size(); ++t)  // refresh_persistent
      if (persistent_[t])
        env_.call(CollKind::kAllGather, GroupKind::kWorld, padded_[t], env_.pdt());
  }

  uint64_t padded_params() const override {
    uint64_t s = 0;
    for (uint64_t p : padded_) s += p;
    return s;
  }

 private:
  void fetch(int m) {
    while (cursor_ < exec_.size() && exec_[cursor_] != m) ++cursor_;
    issue_gathers(m, cursor_ == 0);  // the step's first gather waits with nothing to overlap
    if (!env_.opt.overlap) return;
    uint64_t window = 0;
    for (size_t i = cursor_ + 1; i < exec_.size(); ++i) {
      window += window_[exec_[i]];
      if (window > env_.opt.prefetch_elements) break;
      issue_gathers(exec_[i], false);
    }
  }

  void issue_gathers(int m, bool exposed) {
    for (int t : env_.shape.layout.modules[m].tensors) {
      if (persistent_[t] || full_[t]) continue;
      full_[t] = true;
      env_.mem.alloc(MemCategory::kGatheredParams, env_.bp() * padded_[t]);
      env_.call(CollKind::kAllGather, GroupKind::kWorld, padded_[t], env_.pdt(), exposed);
    }
  }

  void release(int m) {
    for (int t : env_.shape.layout.modules[m].tensors) {
      if (persistent_[t] || !full_[t]) continue;
      full_[t] = false;
      env_.mem.free(MemCategory::kGatheredParams, env_.bp() * padded_[t]);
    }
    reap(false);
  }

  void flush_bucket() {
    if (bucket_.empty()) return;
    uint64_t block = 0;
    for (int t : bucket_) block += padded_[t] / uint64_t(n_);
    const uint64_t staged = env_.bg() * block * (uint64_t(n_) + 1);  // N blocks + the output
    env_.mem.alloc(MemCategory::kCommBuffers, staged);
    for (int t : bucket_) {
      if (!grad_full_[t]) continue;
      grad_full_[t] = false;
      env_.mem.free(MemCategory::kCommBuffers, env_.bg() * padded_[t]);
    }
    env_.call(CollKind::kReduceScatter, GroupKind::kWorld, block * uint64_t(n_), env_.gdt());
    reductions_.push_back({staged, env_.clock});
    bucket_.clear();
    bucket_elems_ = 0;
    reap(false);
  }

  void reap(bool all) {
    while (!reductions_.empty() && (all || env_.done(reductions_.front().issued_at))) {
      env_.mem.free(MemCategory::kCommBuffers, reductions_.front().bytes);
      reductions_.pop_front();
    }
  }

  struct Reduction {
    uint64_t bytes;
    int issued_at;
  };
  int n_ = 1;
  std::vector<uint64_t> padded_, window_;
  std::vector<bool> persistent_, full_, grad_full_;
  std::vector<int> exec_;
  size_t cursor_ = 0;
  std::vector<int> bucket_;
  uint64_t bucket_elems_ = 0;
  std::deque<Reduction> reductions_;
};

}  // namespace

std::unique_ptr<StrategyWalk> make_zero3_walk(WalkEnv& env) {
  return std::make_unique<Zero3Walk>(env);
}

}  // namespace sb
