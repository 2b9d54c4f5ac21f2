// Walk of the four FSDP strategies, hook for hook as strategies/fsdp.cc: one flat parameter
// per wrap unit padded to the shard group; gathered before its first module in forward (with
// forward prefetch of the next unit), resharded after forward unless it is the root or the
// strategy keeps params through backward; gathered again in backward with BACKWARD_PRE/POST
// prefetch; reduce-scatter per unit (+ all-reduce of the shard across nodes when hybrid).
#include <deque>
#include <string>
#include <vector>

#include "harness/predict/walk.h"

namespace sb {
namespace {

// fsdp.cc's wrap_units(): block (one unit per block + root), model (one unit), every-K. It is
// private there, so it is restated here; the bytes tests pin the two to the same padding.
std::vector<std::vector<int>> wrap_units(const ModelLayout& model, const std::string& wrap) {
  const int L = model.config.n_layer;
  int k = L;
  if (wrap == "block")
    k = 1;
  else if (wrap.rfind("every-", 0) == 0)
    k = std::stoi(wrap.substr(6));
  const bool whole = wrap == "model";
  std::vector<std::vector<int>> units(whole ? 1 : 1 + (L + k - 1) / k);
  for (size_t t = 0; t < model.tensors.size(); ++t) {
    const int seg = model.tensors[t].segment;
    const bool root = whole || seg == 0 || seg == L + 1;
    units[root ? 0 : 1 + (seg - 1) / k].push_back(int(t));
  }
  return units;
}

class FsdpWalk final : public StrategyWalk {
 public:
  using StrategyWalk::StrategyWalk;

  void setup() override {
    const ModelLayout& l = env_.shape.layout;
    S_ = env_.group_size(env_.desc.shard_group);
    const auto units = wrap_units(l, env_.opt.wrap);
    units_.resize(units.size());
    unit_of_tensor_.assign(l.tensors.size(), -1);
    for (size_t u = 0; u < units.size(); ++u) {
      uint64_t numel = 0;
      for (int t : units[u]) {
        numel += l.tensors[t].numel;
        unit_of_tensor_[t] = int(u);
      }
      units_[u].padded = round_up(numel, uint64_t(S_));
      const uint64_t shard = units_[u].padded / uint64_t(S_);
      env_.alloc_state(shard, shard, shard);
    }
    const int M = int(l.modules.size());
    for (int m = 0; m < M; ++m) {
      const int u = unit_of_tensor_[l.modules[m].tensors.front()];
      unit_of_module_.push_back(u);
      Unit& U = units_[u];
      if (U.first_fwd < 0) U.first_fwd = m;
      U.last_fwd = m;
      if (U.last_bwd < 0) U.last_bwd = m;
    }
    for (int m = M - 1; m >= 0; --m) {
      Unit& U = units_[unit_of_module_[m]];
      if (U.first_bwd < 0) U.first_bwd = m;
    }
    root_ = unit_of_module_[0];
  }

  void pre_forward(int m) override {
    const int u = unit_of_module_[m];
    gather(u, m == 0);  // the step's first gather has nothing to overlap with
    if (env_.opt.forward_prefetch && m == units_[u].first_fwd) gather(next_unit(m, +1), false);
  }

  void post_forward(int m) override {
    const int u = unit_of_module_[m];
    if (m == units_[u].last_fwd && u != root_ && env_.desc.reshard_after_forward) reshard(u);
  }

  void pre_backward(int m) override {
    const int u = unit_of_module_[m];
    gather(u, false);
    if (m == units_[u].first_bwd && env_.opt.backward_prefetch == BackwardPrefetch::kPre)
      gather(next_unit(m, -1), false);
  }

  void grad_storage(int t) override {
    Unit& U = units_[unit_of_tensor_[t]];
    if (U.full_grad) return;
    U.full_grad = true;  // the unsharded grad lives from the unit's backward to its reduction
    env_.mem.alloc(MemCategory::kGrads, env_.bg() * U.padded);
  }

  void post_backward(int m) override {
    const int u = unit_of_module_[m];
    Unit& U = units_[u];
    if (m != U.last_bwd) return;
    if (env_.opt.backward_prefetch == BackwardPrefetch::kPost) gather(next_unit(m, -1), false);
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
    int first_fwd = -1, last_fwd = -1, first_bwd = -1, last_bwd = -1;
  };

  int next_unit(int m, int step) const {
    const int u = unit_of_module_[m];
    for (int i = m + step; i >= 0 && i < int(unit_of_module_.size()); i += step)
      if (unit_of_module_[i] != u) return unit_of_module_[i];
    return -1;
  }

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
  int S_ = 1, root_ = 0;
  std::vector<Unit> units_;
  std::vector<int> unit_of_tensor_, unit_of_module_;
  std::deque<Pending> reducing_;
};

}  // namespace

std::unique_ptr<StrategyWalk> make_fsdp_walk(WalkEnv& env) {
  return std::make_unique<FsdpWalk>(env);
}

}  // namespace sb
