// Per-parameter sharding by groups, the mechanics FSDP2 (strategies/fsdp2.cc) and MiCS's
// per-unit schedule (strategies/mics.cc) share: every tensor of a wrap unit chunked over the
// shard group on its own (param_shards.h); per unit one all-gather through one flat buffer
// (copy-in, copy-out, the next units prefetched) and one reduce-scatter of the copied-in
// gradients, then, where the shards are replicated, an all-reduce across the replicas. When to
// gather, free and reduce is each policy's.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "strategies/fsdp_plan.h"
#include "strategies/param_shards.h"
#include "strategies/strategy.h"

namespace sb {

class ParamGroups : public Strategy {
 public:
  // replicas: the group the grad shards are all-reduced over (kWorld: none); rows: pad dim 0
  // (FSDP2's torch.chunk) rather than the flat tensor (DeepSpeed's partitions).
  ParamGroups(StrategyContext c, StrategyDescription d, GroupKind replicas, bool rows)
      : Strategy(std::move(c)), desc_(std::move(d)), replicas_(replicas), rows_(rows) {}
  const StrategyDescription& description() const override { return desc_; }

  void setup() override;
  // Implicit prefetch of the next group (PyTorch: the CPU running ahead in forward,
  // FSDPParamGroup._backward_prefetch in backward); more with --fsdp2-prefetch, as the explicit
  // set_modules_to_forward_prefetch / set_modules_to_backward_prefetch lists.
  void on_pre_forward(int m) override {
    unshard(m, +1, plan_.spans[plan_.unit_of_module[m]].first_fwd);
  }
  void on_pre_backward(int m) override {
    unshard(m, -1, plan_.spans[plan_.unit_of_module[m]].first_bwd);
  }
  void begin_micro_step(bool sync) override { sync_ = sync; }
  void finish_backward() override { reap(true); }
  void optimizer_step(int step) override;
  std::vector<float> gather_full_params() override;
  uint64_t padded_params() const override;

 protected:
  struct Group {
    ParamShards layout;
    std::vector<std::unique_ptr<ShardOptimizer>> optims;  // one per parameter
    TypedBuffer shard, grad_shard, full, full_grad, post_forward, gather_out, reduce_in;
    CommHandle gather_first, gather, reduce;  // gather_first: a two-level gather's first
    bool holds_sum = false;  // grad_shard holds this step's reduced sum so far
    uint64_t chunk() const { return layout.chunk_total; }
  };

  virtual void configure() {}  // the policy's knobs, checked before anything is allocated
  virtual DType reduce_dtype() const { return ctx_.options.grad_dtype(); }
  // A gather of its own for group u into G.gather_out (MiCS's two-level one); false: the flat one.
  virtual bool gather_in_two_levels(int u) { return false; }
  virtual uint64_t gathered_node_size() const { return 0; }  // see ParamShards::copy

  std::pair<const void*, DType> param_storage(int t) override;
  std::pair<void*, DType> grad_storage(int t) override;
  // The group of module m unsharded before m runs, and the next groups on their way.
  void unshard(int m, int dir, int first_module);
  void all_gather(int u);
  void wait_unsharded(int u);
  // Group u's gradients copied in and reduce-scattered (the replica all-reduce on `stream`).
  void reduce(int u, CommStream stream);

  StrategyDescription desc_;
  GroupKind replicas_;
  bool rows_;
  FsdpPlan plan_;
  int S_ = 1;
  bool sync_ = true;  // this micro-batch reduces (always, without accumulation)
  bool keep_grads_ = false;  // unsharded grads kept across micro-batches in reduce_dtype()
  std::vector<Group> groups_;

 private:
  TypedBuffer grads_in(const TypedBuffer& grads, DType to);
  void reap(bool all);

  std::deque<int> reducing_;
};

}  // namespace sb
