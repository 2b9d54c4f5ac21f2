// PyTorch FSDP2 (`fully_shard`, torch/distributed/fsdp/_fully_shard/): every parameter sharded on
// dim 0 and padded on its own (param_shards.h); per parameter group (our wrap unit) one
// all-gather through one flat buffer (copy-in, copy-out) and one reduce-scatter (copy-in of the
// grads); reshard_after_forward None (the root kept unsharded after forward) / True / False / an
// int (the node: the backward all-gather stays inside it; True and an int reshard the root too);
// a prefetch count. `fsdp2_hsdp` is the 2-D
// mesh (shard in the node, all-reduce of the grad shard across nodes). DeepSpeed's MiCS is a row
// of the same family: flat partitions over a partition group, replicated, two-level gather.
#include <deque>
#include <memory>

#include "strategies/fsdp_plan.h"
#include "strategies/accumulate.h"
#include "strategies/param_shards.h"
#include "strategies/strategy.h"
#include "strategies/zero3.h"

namespace sb {
namespace {

// shard: the group a parameter is sharded over; replicas: the group its gradient shard is
// all-reduced over (none: kWorld); rows: pad dim 0 (FSDP2) or the flat tensor (DeepSpeed).
struct Fsdp2Spec {
  const char* name;
  const char* family;
  GroupKind shard, replicas;
  bool rows;
};
constexpr Fsdp2Spec kFsdp2Specs[] = {
    {"fsdp2", "fsdp2", GroupKind::kWorld, GroupKind::kWorld, true},
    {"fsdp2_hsdp", "fsdp2", GroupKind::kIntra, GroupKind::kInter, true},
    // MiCS (runtime/zero/mics.py; mics_utils.py create_mics_comm_groups): partition groups of
    // mics_shard_size consecutive ranks, replicate groups across them
    {"mics", "mics", GroupKind::kPartition, GroupKind::kReplica, false},
};

StrategyDescription fsdp2_description(const Fsdp2Spec& s) {
  StrategyDescription d;
  d.name = s.name;
  d.family = s.family;
  d.shards_params = d.shards_grads = d.shards_optimizer = true;
  d.shard_group = s.shard;
  d.replicate_across_nodes = s.replicas != GroupKind::kWorld;
  d.granularity = Granularity::kUnit;
  return d;
}

class Fsdp2 final : public Strategy {
 public:
  Fsdp2(StrategyContext c, const Fsdp2Spec& s)
      : Strategy(std::move(c)), spec_(s), desc_(fsdp2_description(s)) {}
  const StrategyDescription& description() const override { return desc_; }

  void setup() override {
    const auto& o = ctx_.options;
    S_ = group_size(desc_.shard_group);
    const int r = group_index(desc_.shard_group);
    post_forward_ = post_forward_group_size();
    hierarchical_ = hierarchical_gather();
    plan_ = FsdpPlan::build(ctx_.model, o.wrap);
    // MiCS_Optimizer is DeepSpeed's ZeRO-3 optimizer: its IPG buffer (stage3.py, "# IPG") is
    // held all run, though this per-unit schedule reduces each unit from its own copy-in.
    if (!spec_.rows && o.zero_contiguous_gradients)
      ipg_ = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, o.grad_dtype(),
                         o.bucket_elements());
    groups_.resize(plan_.unit_tensors.size());
    for (size_t u = 0; u < groups_.size(); ++u) {
      Group& G = groups_[u];
      G.layout = ParamShards::build(ctx_.model, plan_.unit_tensors[u], S_, spec_.rows);
      G.shard = TypedBuffer(ctx_.memory, MemCategory::kParams, o.param_dtype(), G.chunk());
      G.grad_shard = TypedBuffer(ctx_.memory, MemCategory::kGrads, reduce_dtype(), G.chunk());
      for (const ParamShard& P : G.layout.params) {
        G.optims.push_back(std::make_unique<ShardOptimizer>(
            ctx_.model, P.flat, r * P.chunk, (r + 1) * P.chunk, o.param_dtype(), o.adamw, o.seed,
            ctx_.device, ctx_.memory));
        G.optims.back()->init_params(G.shard.at(P.shard_off));
      }
    }
  }

  // Implicit prefetch of the next group (PyTorch: the CPU running ahead in forward,
  // FSDPParamGroup._backward_prefetch in backward); more with --fsdp2-prefetch, as the explicit
  // set_modules_to_forward_prefetch / set_modules_to_backward_prefetch lists.
  void on_pre_forward(int m) override {
    unshard(m, +1, plan_.spans[plan_.unit_of_module[m]].first_fwd);
  }
  void on_pre_backward(int m) override {
    unshard(m, -1, plan_.spans[plan_.unit_of_module[m]].first_bwd);
  }

  // Activation checkpointing. FSDP2: FSDPState._pre_forward and _post_forward
  // (_fully_shard/_fsdp_state.py) return at once in PRE_BACKWARD ("the pre-backward hook is
  // responsible for the unshard"), so the recompute runs inside the group's backward unshard.
  // MiCS runs DeepSpeed's ZeRO-3 module hooks, which fire again on the recompute: the group is
  // gathered for it (the trace's next module is its own backward: no forward prefetch) and
  // released after, as after any forward, then gathered again for backward.
  void on_pre_recompute(int m) override {
    const int u = plan_.unit_of_module[m];
    if (spec_.rows) return on_pre_backward(plan_.spans[u].first_bwd);
    all_gather(u);
    wait_unsharded(u);
  }
  void on_post_recompute(int m) override {
    if (!spec_.rows) on_post_forward(m);
  }

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

  // Gradient accumulation. FSDP2 under set_requires_gradient_sync(False) on the non-final
  // micro-batches (_fsdp_param_group.py, FSDPParamGroup.post_backward: `if not
  // self.reduce_grads:` reshard and return, the unsharded grads kept): one reduce-scatter per
  // step, Ψ_pad·b_g of unsharded grads held in between. MiCS as DeepSpeed's ZeRO-3 under it
  // (stage3.py partition_grads: a reduce-scatter every micro-batch, added into the partition's
  // grad; mics.py MiCS_Optimizer.allreduce_mics_shard_grads: the replica all-reduce only at
  // is_gradient_accumulation_boundary()).
  void begin_micro_step(bool sync) override { sync_ = sync; }

  void on_post_backward(int m) override {
    const int u = plan_.unit_of_module[m];
    if (m != plan_.spans[u].last_bwd) return;
    Group& G = groups_[u];
    if (!sync_ && spec_.rows) {  // FSDP2: keep the unsharded grads, reshard the params
      G.full.reset();
      return;
    }
    // foreach_reduce: the unsharded grads cast to reduce_dtype (_to_dtype_if_needed), then
    // copy-in into one flat buffer, rank by rank
    TypedBuffer cast = grads_in(G.full_grad, reduce_dtype());
    G.reduce_in =
        TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, reduce_dtype(), G.layout.padded());
    G.layout.copy(ctx_.device, cast.empty() ? G.full_grad.data() : cast.data(),
                  G.reduce_in.data(), dtype_bytes(G.reduce_in.dtype()), 0, G.layout.shards, false);
    G.full_grad.reset();
    G.full.reset();  // the root too: resharded after backward
    // MiCS: the shard's sum of earlier micro-batches goes into this rank's own block of the
    // input, so the reduce-scatter returns it plus this micro-batch's sum over the partition.
    if (G.holds_sum)
      add_grads(ctx_.device, ctx_.memory,
                 G.reduce_in.at(uint64_t(group_index(desc_.shard_group)) * G.chunk()),
                 G.grad_shard.data(), G.chunk(), G.grad_shard.dtype());
    G.holds_sum = true;
    const std::string tag = "group" + std::to_string(u);
    // after this reduce-scatter each rank holds its shard of the group's grads, summed over the
    // shard group
    G.reduce = maybe_wait(ctx_.comm.reduce_scatter_async(G.reduce_in.data(), G.grad_shard.data(),
                                                         G.chunk(), G.grad_shard.dtype(),
                                                         desc_.shard_group, tag));
    if (sync_ && desc_.replicate_across_nodes && group_size(spec_.replicas) > 1) {
      // after this all-reduce (HSDP's replicate dim; MiCS_Optimizer.allreduce_mics_shard_grads)
      // the shard also sums every replica's. FSDP2 runs it on a stream of its own once the
      // reduce-scatter is done (torch main, _fsdp_collectives.py foreach_reduce:
      // all_reduce_stream.wait_stream(reduce_scatter_stream)); MiCS on its one stream.
      const CommStream stream = spec_.rows ? CommStream::kSide : CommStream::kMain;
      G.reduce = maybe_wait(ctx_.comm.all_reduce_async(G.grad_shard.data(), G.chunk(),
                                                       G.grad_shard.dtype(), spec_.replicas, tag,
                                                       stream, G.reduce));
    }
    reducing_.push_back(u);
    reap(false);
  }

  void finish_backward() override { reap(true); }

  void optimizer_step(int step) override {
    const float scale = mean_grad_scale();
    for (Group& G : groups_) {
      G.holds_sum = false;
      for (size_t i = 0; i < G.optims.size(); ++i) {
        const uint64_t at = G.layout.params[i].shard_off;
        G.optims[i]->step(G.shard.at(at), G.grad_shard.at(at), G.grad_shard.dtype(), scale, step);
      }
    }
  }

  std::vector<float> gather_full_params() override {
    std::vector<float> out;
    for (Group& G : groups_) {
      TypedBuffer gathered(ctx_.memory, MemCategory::kWorkspace, G.shard.dtype(),
                           G.layout.padded());
      ctx_.comm.all_gather(G.shard.data(), gathered.data(), G.chunk(), G.shard.dtype(),
                           desc_.shard_group);
      TypedBuffer full(ctx_.memory, MemCategory::kWorkspace, G.shard.dtype(), G.layout.padded());
      G.layout.copy(ctx_.device, full.data(), gathered.data(), dtype_bytes(full.dtype()), 0,
                    G.layout.shards, true);
      for (const ParamShard& P : G.layout.params)  // writes tensor P.tensor only
        flat_to_full(ctx_.model, P.flat, full.at(P.full_off), full.dtype(), ctx_.device, out);
    }
    return out;
  }
  uint64_t padded_params() const override {
    uint64_t n = 0;
    for (const Group& G : groups_) n += G.layout.padded();
    return n;
  }

 protected:
  std::pair<const void*, DType> param_storage(int t) override {
    Group& G = groups_[plan_.unit_of_tensor[t]];
    return {G.full.at(G.layout.find(t).full_off), G.full.dtype()};
  }
  std::pair<void*, DType> grad_storage(int t) override {
    Group& G = groups_[plan_.unit_of_tensor[t]];
    // Unsharded grads live from the group's backward to the copy-in. Kept across micro-batches
    // they are held in reduce_dtype (FSDPParam.to_accumulated_grad_if_needed).
    const bool kept = spec_.rows && ctx_.options.grad_accum > 1;
    if (G.full_grad.empty())
      G.full_grad = TypedBuffer(ctx_.memory, MemCategory::kGrads,
                                kept ? reduce_dtype() : ctx_.options.grad_dtype(),
                                G.layout.padded());
    return {G.full_grad.at(G.layout.find(t).full_off), G.full_grad.dtype()};
  }

 private:
  struct Group {
    ParamShards layout;
    std::vector<std::unique_ptr<ShardOptimizer>> optims;  // one per parameter
    TypedBuffer shard, grad_shard, full, full_grad, post_forward, gather_out, reduce_in;
    CommHandle gather_first, gather, reduce;  // gather_first: the two-level gather's first
    bool holds_sum = false;  // grad_shard holds this step's reduced sum so far (MiCS)
    uint64_t chunk() const { return layout.chunk_total; }
  };

  // MixedPrecisionPolicy.reduce_dtype: fp32 when asked (FSDP2 only), else the grads' dtype.
  DType reduce_dtype() const {
    return spec_.rows && ctx_.options.fsdp2_reduce_fp32 ? DType::kF32 : ctx_.options.grad_dtype();
  }
  // `grads` cast to `to` in a workspace, or nothing when it is already of that dtype.
  TypedBuffer grads_in(const TypedBuffer& grads, DType to) {
    if (grads.dtype() == to) return {};
    TypedBuffer out(ctx_.memory, MemCategory::kWorkspace, to, grads.size());
    ctx_.device.bf16_to_f32(static_cast<float*>(out.data()),
                            static_cast<const uint16_t*>(grads.data()), grads.size());
    return out;
  }

  // reshard_after_forward as a post-forward group size (_fsdp_init.py _get_post_forward_mesh_info:
  // an int divides the shard group; 1 is False, the group size True); other ints: the node.
  int post_forward_group_size() const {
    if (!spec_.rows) return S_;  // MiCS releases after each forward; the FSDP2 knob is not its
    const int k = ctx_.options.fsdp2_reshard_after_forward;
    if (k < 0 || k == S_) return S_;
    if (k <= 1) return 1;
    if (k > S_ || desc_.shard_group != GroupKind::kWorld || k != group_size(GroupKind::kIntra))
      throw std::invalid_argument("--fsdp2-reshard-after-forward " + std::to_string(k) +
                                  ": must be 1, the shard group or (fsdp2) the node's size");
    return k;
  }

  // The root stays unsharded after forward only with reshard_after_forward=None (FSDPState.
  // _lazy_init); MiCS's per-unit schedule keeps its root whatever the FSDP2 knob says.
  bool keep_root() const {
    return !spec_.rows || ctx_.options.fsdp2_reshard_after_forward == kFsdp2ReshardAuto;
  }

  // mics_hierarchical_params_gather (MiCS_Init._hierarchical_all_gather_params): when the
  // partition spans whole nodes, an all-gather across them, then one inside the node.
  bool hierarchical_gather() const {
    if (spec_.rows || !ctx_.options.mics_hierarchical_params_gather) return false;
    const int G = group_size(GroupKind::kIntra);
    if (S_ <= G || S_ % G != 0)
      throw std::invalid_argument("--mics-hierarchical-params-gather on: the partition of " +
                                  std::to_string(S_) + " must span whole nodes of " +
                                  std::to_string(G));
    return true;
  }

  // The group of module m unsharded before m runs, and the next `prefetch` groups on their way.
  void unshard(int m, int dir, int first_module) {
    const int u = plan_.unit_of_module[m];
    all_gather(u);
    if (m == first_module) {
      int at = m;
      for (int i = 0; i < ctx_.options.fsdp2_prefetch; ++i) {
        const int next = plan_.next_unit(at, dir);
        if (next < 0) break;
        all_gather(next);
        at = dir > 0 ? plan_.spans[next].last_fwd : plan_.spans[next].last_bwd;
      }
    }
    wait_unsharded(u);
  }

  // foreach_all_gather: copy-in of this rank's shard into its block of the flat output, then one
  // all-gather of the group in place. After an int reshard: my share of the node's copy, over it.
  void all_gather(int u) {
    Group& G = groups_[u];
    if (!G.full.empty() || G.gather.valid()) return;
    const bool node = !G.post_forward.empty();
    const GroupKind over = node ? GroupKind::kIntra : desc_.shard_group;
    TypedBuffer& in = node ? G.post_forward : G.shard;
    G.gather_out =
        TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, G.shard.dtype(), G.layout.padded());
    if (hierarchical_) return two_level_gather(u);
    void* mine = G.gather_out.at(uint64_t(group_index(over)) * in.size());
    ctx_.device.copy(mine, in.data(), in.bytes());
    const size_t count = in.size();
    G.post_forward.reset();
    // after this all-gather every rank of `over` holds the group's S rank blocks in order
    G.gather = maybe_wait(ctx_.comm.all_gather_async(
        mine, G.gather_out.data(), count, G.shard.dtype(), over, "group" + std::to_string(u)));
  }

  // Block (l, j) of the output holds partition rank j·G + l (ParamShards::rank_of). The comm
  // stream runs the two in issue order, so the second reads what the first wrote.
  void two_level_gather(int u) {
    Group& G = groups_[u];
    const uint64_t C = G.chunk(), nodes = uint64_t(S_ / group_size(GroupKind::kIntra));
    const uint64_t mine = uint64_t(group_index(GroupKind::kIntra)) * nodes;
    void* in = G.gather_out.at((mine + group_index(GroupKind::kPartitionInter)) * C);
    ctx_.device.copy(in, G.shard.data(), G.shard.bytes());
    const std::string tag = "group" + std::to_string(u);
    // after this all-gather I hold the shards of my partition's ranks with my local rank
    G.gather_first = maybe_wait(ctx_.comm.all_gather_async(
        in, G.gather_out.at(mine * C), C, G.shard.dtype(), GroupKind::kPartitionInter, tag));
    // after this all-gather every rank of the node holds the whole partition's shards
    G.gather =
        maybe_wait(ctx_.comm.all_gather_async(G.gather_out.at(mine * C), G.gather_out.data(),
                                              nodes * C, G.shard.dtype(), GroupKind::kIntra, tag));
  }

  // Wait for the group's all-gather, then copy-out into the unsharded parameters.
  void wait_unsharded(int u) {
    Group& G = groups_[u];
    if (!G.gather.valid()) return;
    G.gather.wait();
    if (G.gather_first.valid()) G.gather_first.wait();
    G.gather = G.gather_first = CommHandle();
    G.full = TypedBuffer(ctx_.memory, MemCategory::kGatheredParams, G.shard.dtype(),
                         G.gather_out.size());
    G.layout.copy(ctx_.device, G.full.data(), G.gather_out.data(), dtype_bytes(G.full.dtype()), 0,
                  G.layout.shards, true, hierarchical_ ? group_size(GroupKind::kIntra) : 0);
    G.gather_out.reset();
  }

  // Free the reduce-scatter inputs of groups whose reduction has finished.
  void reap(bool all) {
    while (!reducing_.empty()) {
      Group& G = groups_[reducing_.front()];
      if (!all && !G.reduce.done()) break;
      G.reduce.wait();
      G.reduce_in.reset();
      reducing_.pop_front();
    }
  }

  const Fsdp2Spec& spec_;
  StrategyDescription desc_;
  FsdpPlan plan_;
  int S_ = 1, post_forward_ = 1;
  bool hierarchical_ = false;
  bool sync_ = true;  // this micro-batch reduces (always, without accumulation)
  std::vector<Group> groups_;
  std::deque<int> reducing_;
  TypedBuffer ipg_;  // MiCS: ZeRO-3's contiguous_gradients buffer
};

}  // namespace

// fsdp2 and fsdp2_hsdp; MiCS registers itself (strategies/mics.cc) and builds this per-unit
// schedule only for --mics-schedule per-unit.
void register_fsdp2(std::vector<StrategyEntry>& out) {
  for (const Fsdp2Spec& s : kFsdp2Specs) {
    if (!s.rows) continue;
    out.push_back({fsdp2_description(s), [&s](StrategyContext c) -> std::unique_ptr<Strategy> {
                     return std::make_unique<Fsdp2>(std::move(c), s);
                   }});
  }
}

std::unique_ptr<Strategy> make_mics_per_unit(StrategyContext c) {
  return std::make_unique<Fsdp2>(std::move(c), kFsdp2Specs[2]);
}

}  // namespace sb
