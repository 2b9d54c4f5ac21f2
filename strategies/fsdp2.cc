// PyTorch FSDP2 (`fully_shard`, torch/distributed/fsdp/_fully_shard/): every parameter sharded on
// dim 0 and padded on its own (param_shards.h); per parameter group (our wrap unit) one
// all-gather through one flat buffer (copy-in, copy-out) and one reduce-scatter (copy-in of the
// grads): strategies/param_groups.h. Here the policy: reshard_after_forward None (the root kept
// unsharded after forward) / True / False / an int (the node: the backward all-gather stays
// inside it; True and an int reshard the root too); a prefetch count; reduce_dtype; gradient
// accumulation without reduction. `fsdp2_hsdp` is the 2-D mesh (shard in the node, all-reduce
// of the grad shard across nodes).
#include <memory>
#include <stdexcept>
#include <string>

#include "strategies/param_groups.h"

namespace sb {
namespace {

// shard: the group a parameter is sharded over; replicas: the group its gradient shard is
// all-reduced over (none: kWorld).
struct Fsdp2Spec {
  const char* name;
  GroupKind shard, replicas;
};
constexpr Fsdp2Spec kFsdp2Specs[] = {
    {"fsdp2", GroupKind::kWorld, GroupKind::kWorld},
    {"fsdp2_hsdp", GroupKind::kIntra, GroupKind::kInter},
};

StrategyDescription fsdp2_description(const Fsdp2Spec& s) {
  return fully_sharded(s.name, "fsdp2", s.shard, Granularity::kUnit,
                       s.replicas != GroupKind::kWorld);
}

class Fsdp2 final : public ParamGroups {
 public:
  Fsdp2(StrategyContext c, const Fsdp2Spec& s)
      : ParamGroups(std::move(c), fsdp2_description(s), s.replicas, true) {}

  // Activation checkpointing. FSDPState._pre_forward and _post_forward
  // (_fully_shard/_fsdp_state.py) return at once in PRE_BACKWARD ("the pre-backward hook is
  // responsible for the unshard"), so the recompute runs inside the group's backward unshard.
  void on_pre_recompute(int m) override {
    on_pre_backward(plan_.spans[plan_.unit_of_module[m]].first_bwd);
  }
  void on_post_recompute(int m) override {}

  void on_post_forward(int m) override {
    const int u = plan_.unit_of_module[m];
    if (m != plan_.spans[u].last_fwd || (u == plan_.root && keep_root()) || post_forward_ == 1)
      return;
    Group& G = groups_[u];
    if (post_forward_ == S_) {
      G.full.reset();  // reshard_after_forward=True: back to the shard
      return;
    }
    // reshard_after_forward=int (FSDPParam.to_sharded_post_forward): keep this rank's share of
    // the node's copy, S / k of the S rank blocks, for an all-gather inside the node.
    const uint64_t blocks = uint64_t(S_ / post_forward_);
    G.post_forward =
        TypedBuffer(ctx_.memory, MemCategory::kGatheredParams, G.shard.dtype(), blocks * G.chunk());
    G.layout.copy(ctx_.device, G.full.data(), G.post_forward.data(), dtype_bytes(G.full.dtype()),
                  group_index(GroupKind::kIntra) * blocks, blocks, false);
    G.full.reset();
  }

  // Gradient accumulation under set_requires_gradient_sync(False) on the non-final
  // micro-batches (_fsdp_param_group.py, FSDPParamGroup.post_backward: `if not
  // self.reduce_grads:` reshard and return, the unsharded grads kept): one reduce-scatter per
  // step, Ψ_pad·b_g of unsharded grads held in between. The HSDP all-reduce runs on a stream of
  // its own once the reduce-scatter is done (torch main, _fsdp_collectives.py foreach_reduce:
  // all_reduce_stream.wait_stream(reduce_scatter_stream)).
  void on_post_backward(int m) override {
    const int u = plan_.unit_of_module[m];
    if (m != plan_.spans[u].last_bwd) return;
    if (!sync_) {  // keep the unsharded grads, reshard the params
      groups_[u].full.reset();
      return;
    }
    reduce(u, CommStream::kSide);
  }

 protected:
  void configure() override {
    post_forward_ = post_forward_group_size();
    keep_grads_ = ctx_.options.grad_accum > 1;
  }

  // MixedPrecisionPolicy.reduce_dtype: fp32 when asked, else the grads' dtype.
  DType reduce_dtype() const override {
    return ctx_.options.fsdp2_reduce_fp32 ? DType::kF32 : ctx_.options.grad_dtype();
  }

 private:
  // reshard_after_forward as a post-forward group size (_fsdp_init.py _get_post_forward_mesh_info:
  // an int divides the shard group; 1 is False, the group size True); other ints: the node.
  int post_forward_group_size() const {
    const int k = ctx_.options.fsdp2_reshard_after_forward;
    if (k < 0 || k == S_) return S_;
    if (k <= 1) return 1;
    if (k > S_ || desc_.shard_group != GroupKind::kWorld || k != group_size(GroupKind::kIntra))
      throw std::invalid_argument("--fsdp2-reshard-after-forward " + std::to_string(k) +
                                  ": must be 1, the shard group or (fsdp2) the node's size");
    return k;
  }

  // The root stays unsharded after forward only with reshard_after_forward=None (FSDPState.
  // _lazy_init).
  bool keep_root() const {
    return ctx_.options.fsdp2_reshard_after_forward == kFsdp2ReshardAuto;
  }

  int post_forward_ = 1;
};

}  // namespace

void register_fsdp2(std::vector<StrategyEntry>& out) {
  for (const Fsdp2Spec& s : kFsdp2Specs)
    out.push_back({fsdp2_description(s), [&s](StrategyContext c) -> std::unique_ptr<Strategy> {
                     return std::make_unique<Fsdp2>(std::move(c), s);
                   }});
}

}  // namespace sb
