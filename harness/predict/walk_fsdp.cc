// Walk of the four FSDP strategies, hook for hook as strategies/fsdp.cc: one flat parameter
// per wrap unit padded to the shard group; gathered before its first module in forward (with
// forward prefetch of the next unit), resharded after forward unless it is the root or the
// strategy keeps params through backward; gathered again in backward with BACKWARD_PRE/POST
// prefetch; reduce-scatter per unit (+ all-reduce of the shard across nodes when hybrid).
#include <deque>
#include <string>
#include <vector>

#include "harness/predict/walk.h"
#include "strategies/fsdp_plan.h"

namespace sb {
namespace {

class FsdpWalk final : public StrategyWalk {
 public:
  using StrategyWalk::StrategyWalk;

  void setup() override {
    const ModelLayout& l = env_.shape.layout;
    S_ = env_.group_size(env_.desc.shard_group);
    plan_ = FsdpPlan::build(l, env_.opt.wrap);
    units_.resize(plan_.unit_tensors.size());
    for (size_t u = 0; u < units_.size(); ++u) {
      uint64_t numel = 0;
      for (int t : plan_.unit_tensors[u]) numel += l.tensors[t].numel;
      units_[u].padded = round_up(numel, uint64_t(S_));
      const uint64_t shard = units_[u].padded / uint64_t(S_);
      env_.alloc_state(shard, shard, shard);
    }
  }

  void pre_forward(int m) override {
    const int u = plan_.unit_of_module[m];
    gather(u, m == 0);  // the step's first gather has nothing to overlap with
    if (env_.opt.forward_prefetch && m == plan_.spans[u].first_fwd) gather(plan_.next_unit(m, +1), false);
  }

  void post_forward(int m) override {
    const int u = plan_.unit_of_module[m];
    if (m == plan_.spans[u].last_fwd && u != plan_.root && env_.desc.reshard_after_forward) reshard(u);
  }

  void pre_backward(int m) override {
    const int u = plan_.unit_of_module[m];
    gather(u, false);
    if (m == plan_.spans[u].first_bwd && env_.opt.backward_prefetch == BackwardPrefetch::kPre)
      gather(plan_.next_unit(m, -1), false);
  }

  void grad_storage(int t) override {
    Unit& U = units_[plan_.unit_of_tensor[t]];
    if (U.full_grad) return;
    U.full_grad = true;  // the unsharded grad lives from the unit's backward to its reduction
    env_.mem.alloc(MemCategory::kGrads, env_.bg() * U.padded);
  }

  void post_backward(int m) override {
    const int u = plan_.unit_of_module[m];
    Unit& U = units_[u];
    if (m != plan_.spans[u].last_bwd) return;
    if (env_.opt.backward_prefetch == BackwardPrefetch::kPost) gather(plan_.next_unit(m, -1), false);
    env_.call(CollKind::kReduceScatter, env_.desc.shard_group, U.padded, env_.gdt());
    if (env_.desc.replicate_across_nodes)
      env_.call(CollKind::kAllReduce, GroupKind::kInter, U.padded / uint64_t(S_), env_.gdt());
    reshard(u);
    reducing_.push_back({u, env_.clock});
    reap(false);
  }

  void finish_backward() override { reap(true); }

  void optimizer_step() override {
    for (const Unit& U : units_) env_.optimizer_shard(U.padded / uint64_t(S_));
  }

  uint64_t padded_params() const override {
    uint64_t s = 0;
    for (const Unit& U : units_) s += U.padded;
    return s;
  }

 private:
  struct Unit {
    uint64_t padded = 0;
    bool full = false, full_grad = false;
  };

  void gather(int u, bool exposed) {
    if (u < 0 || units_[u].full) return;
    units_[u].full = true;
    env_.mem.alloc(MemCategory::kGatheredParams, env_.bp() * units_[u].padded);
    env_.call(CollKind::kAllGather, env_.desc.shard_group, units_[u].padded, env_.pdt(), exposed);
  }

  void reshard(int u) {
    if (!units_[u].full) return;
    units_[u].full = false;
    env_.mem.free(MemCategory::kGatheredParams, env_.bp() * units_[u].padded);
  }

  void reap(bool all) {
    while (!reducing_.empty() && (all || env_.done(reducing_.front().issued_at))) {
      Unit& U = units_[reducing_.front().unit];
      U.full_grad = false;
      env_.mem.free(MemCategory::kGrads, env_.bg() * U.padded);
      reducing_.pop_front();
    }
  }

  struct Pending {
    int unit, issued_at;
  };
  int S_ = 1;
  FsdpPlan plan_;
  std::vector<Unit> units_;
  std::deque<Pending> reducing_;
};

}  // namespace

std::unique_ptr<StrategyWalk> make_fsdp_walk(WalkEnv& env) {
  return std::make_unique<FsdpWalk>(env);
}

}  // namespace sb
