// PyTorch FSDP (Zhao et al. 2023): one flat parameter per wrap unit, sharded with padding over
// the shard group. The four sharding strategies differ only in two knobs, kept as data in
// kFsdpSpecs: reshard after forward (FULL_SHARD) or keep params from forward through backward
// (SHARD_GRAD_OP), and the shard group (world, or the node with an all-reduce of the gradient
// shard across nodes: HYBRID_SHARD). The root unit (embeddings, final norm, head) runs first
// and last, so, as in FSDP, it is not resharded after forward.
#include <deque>
#include <memory>

#include "harness/common/check.h"
#include "strategies/accumulate.h"
#include "strategies/fsdp_plan.h"
#include "strategies/strategy.h"

namespace sb {
namespace {

struct FsdpSpec { const char* name; bool reshard_after_forward; bool hybrid; };
constexpr FsdpSpec kFsdpSpecs[] = {
    {"fsdp_full_shard", true, false},
    {"fsdp_shard_grad_op", false, false},
    {"fsdp_hybrid_shard", true, true},
    {"fsdp_hybrid_shard_zero2", false, true},
};

StrategyDescription fsdp_description(const FsdpSpec& s) {
  const GroupKind group = s.hybrid ? GroupKind::kIntra : GroupKind::kWorld;
  StrategyDescription d = fully_sharded(s.name, "fsdp", group, Granularity::kUnit, s.hybrid);
  d.reshard_after_forward = s.reshard_after_forward;
  return d;
}

class Fsdp final : public Strategy {
 public:
  Fsdp(StrategyContext c, const FsdpSpec& s) : Strategy(std::move(c)), desc_(fsdp_description(s)) {}
  const StrategyDescription& description() const override { return desc_; }

  void setup() override {
    const auto& o = ctx_.options;
    const int S = group_size(desc_.shard_group), r = group_index(desc_.shard_group);
    plan_ = FsdpPlan::build(ctx_.model, ctx_.options.wrap);
    units_.resize(plan_.unit_tensors.size());
    for (size_t u = 0; u < units_.size(); ++u) {
      Unit& U = units_[u];
      // use_orig_params (torch >= 2.0 _flat_param.py, FlatParamHandle
      // ._init_flat_param_and_metadata with _get_aligned_numel): 16 bytes of the param dtype
      const uint64_t align = o.fsdp_use_orig_params ? 16 / dtype_bytes(o.param_dtype()) : 1;
      U.flat = FlatLayout::build(ctx_.model, plan_.unit_tensors[u], S, align);
      const uint64_t shard = U.flat.shard_size(S);
      U.shard = TypedBuffer(ctx_.memory, MemCategory::kParams, o.param_dtype(), shard);
      U.grad_shard = TypedBuffer(ctx_.memory, MemCategory::kGrads, o.grad_dtype(), shard);
      U.optim = std::make_unique<ShardOptimizer>(ctx_.model, U.flat, r * shard, (r + 1) * shard,
                                                 o.param_dtype(), o.adamw, o.seed, ctx_.device,
                                                 ctx_.memory);
      U.optim->init_params(U.shard.data());
    }
  }

  void on_pre_forward(int m) override {
    const int u = plan_.unit_of_module[m];
    gather(u);
    if (ctx_.options.forward_prefetch && m == plan_.spans[u].first_fwd)
      gather(plan_.next_unit(m, +1));
    wait_gathered(u);
  }

  void on_post_forward(int m) override {
    const int u = plan_.unit_of_module[m];
    if (m == plan_.spans[u].last_fwd && u != plan_.root && desc_.reshard_after_forward)
      reshard(units_[u]);
  }

  void on_pre_backward(int m) override {
    const int u = plan_.unit_of_module[m];
    gather(u);
    if (m == plan_.spans[u].first_bwd && ctx_.options.backward_prefetch == BackwardPrefetch::kPre)
      gather(plan_.next_unit(m, -1));  // BACKWARD_PRE: before this unit's gradient computation
    wait_gathered(u);
  }

  // Activation checkpointing as FSDP(checkpoint_wrapper(block)) (torch 1.13.1): the recompute
  // (torch/utils/checkpoint.py, the saved tensors' unpack in backward) calls the wrapped
  // block's forward, not FullyShardedDataParallel.forward, and runs after the unit's
  // _pre_backward_hook (registered on the unit's outputs) has unsharded it: one gather serves
  // the recompute and the backward, and nothing is resharded in between.
  void on_pre_recompute(int m) override {
    on_pre_backward(plan_.spans[plan_.unit_of_module[m]].first_bwd);
  }
  void on_post_recompute(int) override {}

  // Gradient accumulation as FullyShardedDataParallel.no_sync() (torch 1.13.1,
  // fully_sharded_data_parallel.py, _post_backward_hook returns before the reduce-scatter when
  // not _sync_gradients): units reshard as usual, each unit's unsharded gradient is kept
  // (Ψ_pad·b_g per rank until the last micro-batch) and accumulates; the last reduce-scatters.
  // Without no_sync (options.fsdp_no_sync false) every micro-batch reduce-scatters, and the
  // shard accumulates the reduced sums (_post_backward_hook: `param._saved_grad_shard += output`).
  void begin_micro_step(bool sync) override { sync_ = sync || !ctx_.options.fsdp_no_sync; }

  void on_post_backward(int m) override {
    const int u = plan_.unit_of_module[m];
    Unit& U = units_[u];
    if (m != plan_.spans[u].last_bwd) return;
    // _post_backward_hook: _reshard (free the unit) first, then _prefetch_handles
    // (BACKWARD_POST's gather of the next unit), then the reduce-scatter.
    reshard(U);  // the comm thread reads only the grads from here on
    if (ctx_.options.backward_prefetch == BackwardPrefetch::kPost)
      gather(plan_.next_unit(m, -1));
    if (!sync_) return;
    const GroupKind g = desc_.shard_group;
    // A shard that already holds this step's earlier micro-batches receives into a buffer of
    // its own, added in when the reduction completes (reap).
    if (U.holds_sum)
      U.incoming = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, U.grad_shard.dtype(),
                               U.grad_shard.size());
    TypedBuffer& out = U.holds_sum ? U.incoming : U.grad_shard;
    U.holds_sum = true;
    // after this reduce-scatter each rank holds its shard of the unit's grads, summed over the
    // shard group
    U.reduce = maybe_wait(ctx_.comm.reduce_scatter_async(U.full_grad.data(), out.data(),
                                                         out.size(), out.dtype(), g,
                                                         "unit" + std::to_string(u)));
    if (desc_.replicate_across_nodes) {
      // HYBRID_SHARD's all-reduce runs on a stream and process group of its own, after this
      // unit's reduce-scatter but not behind the next units' collectives (torch main,
      // _runtime_utils.py, _post_backward_reshard / _reduce_grad: state._all_reduce_stream
      // .wait_stream(state._post_backward_stream), then dist.all_reduce on
      // state._inter_node_pg). After this all-reduce the shard holds the sum over every node's
      // replica as well.
      U.reduce = maybe_wait(ctx_.comm.all_reduce_async(out.data(), out.size(), out.dtype(),
                                                       GroupKind::kInter,
                                                       "unit" + std::to_string(u),
                                                       CommStream::kSide, U.reduce));
    }
    reducing_.push_back(u);
    reap(false);
  }

  void finish_backward() override { reap(true); }

  void optimizer_step(int step) override {
    const float scale = mean_grad_scale();
    for (Unit& U : units_) SB_CHECK(U.full.empty(), "a unit is still gathered at the step");
    for (Unit& U : units_) {
      U.optim->step(U.shard.data(), U.grad_shard.data(), U.grad_shard.dtype(), scale, step);
      U.holds_sum = false;
    }
  }

  std::vector<float> gather_full_params() override {
    std::vector<float> out;
    for (Unit& U : units_) {
      TypedBuffer full(ctx_.memory, MemCategory::kWorkspace, U.shard.dtype(), U.flat.padded);
      ctx_.comm.all_gather(U.shard.data(), full.data(), U.shard.size(), U.shard.dtype(),
                           desc_.shard_group);
      flat_to_full(ctx_.model, U.flat, full.data(), full.dtype(), ctx_.device, out);
    }
    return out;
  }
  uint64_t padded_params() const override {
    uint64_t n = 0;
    for (const Unit& U : units_) n += U.flat.padded;
    return n;
  }

 protected:
  std::pair<const void*, DType> param_storage(int t) override {
    Unit& U = units_[plan_.unit_of_tensor[t]];
    return {U.full.at(U.flat.find(t)->offset), U.full.dtype()};
  }
  std::pair<void*, DType> grad_storage(int t) override {
    Unit& U = units_[plan_.unit_of_tensor[t]];
    if (U.full_grad.empty())  // the unsharded grad lives from the unit's backward to its RS
      U.full_grad = TypedBuffer(ctx_.memory, MemCategory::kGrads, ctx_.options.grad_dtype(),
                                U.flat.padded);
    return {U.full_grad.at(U.flat.find(t)->offset), U.full_grad.dtype()};
  }

 private:
  struct Unit {
    FlatLayout flat;
    TypedBuffer shard, grad_shard, full, full_grad;
    TypedBuffer incoming;    // a later micro-batch's reduced shard, before it is added in
    bool holds_sum = false;  // grad_shard holds this step's reduced sum so far
    std::unique_ptr<ShardOptimizer> optim;
    CommHandle gather, reduce;
  };

  // Issue the unit's all-gather unless it is whole already or on its way.
  void gather(int u) {
    if (u < 0) return;
    Unit& U = units_[u];
    if (!U.full.empty()) return;
    // limit_all_gathers (torch 1.13.1 fully_sharded_data_parallel.py, _unshard and
    // _FreeEventQueue.dequeue_if_needed): with two frees queued, the CPU waits for the oldest,
    // the free event of the reshard two back; it never waits on an all-gather.
    if (ctx_.options.limit_all_gathers && free_events_.size() >= 2) {
      ctx_.device.wait_event(free_events_.front());
      free_events_.pop_front();
    }
    U.full = TypedBuffer(ctx_.memory, MemCategory::kGatheredParams, U.shard.dtype(), U.flat.padded);
    // after this all-gather every rank of the shard group holds the unit's flat param whole
    U.gather = maybe_wait(ctx_.comm.all_gather_async(U.shard.data(), U.full.data(), U.shard.size(),
                                                     U.shard.dtype(), desc_.shard_group,
                                                     "unit" + std::to_string(u)));
  }

  void wait_gathered(int u) {
    Unit& U = units_[u];
    if (U.gather.valid()) U.gather.wait();
    U.gather = CommHandle();
  }

  // _reshard: free the unit's unsharded flat param; with limit_all_gathers, record the free
  // event on the compute stream and queue it (_FreeEventQueue.enqueue).
  void reshard(Unit& U) {
    U.full.reset();
    if (ctx_.options.limit_all_gathers) free_events_.push_back(ctx_.device.record_event());
  }

  // Free the unsharded grads of units whose reduction has finished; add in what a later
  // micro-batch reduced beside the shard.
  void reap(bool all) {
    reap_units(reducing_, units_, all, [this](Unit& U) {
      U.full_grad.reset();
      if (!U.incoming.empty())
        add_grads(ctx_.device, ctx_.memory, U.grad_shard.data(), U.incoming.data(),
                  U.grad_shard.size(), U.grad_shard.dtype());
      U.incoming.reset();
    });
  }

  StrategyDescription desc_;
  FsdpPlan plan_;
  std::vector<Unit> units_;
  std::deque<int> reducing_;
  std::deque<uint64_t> free_events_;  // limit_all_gathers: reshards' free events, oldest first
  bool sync_ = true;  // this micro-batch reduces (always, without accumulation)
};

}  // namespace

void register_fsdp(std::vector<StrategyEntry>& out) {
  for (const FsdpSpec& s : kFsdpSpecs) {
    out.push_back({fsdp_description(s), [&s](StrategyContext c) -> std::unique_ptr<Strategy> {
                     return std::make_unique<Fsdp>(std::move(c), s);
                   }});
  }
}

}  // namespace sb
