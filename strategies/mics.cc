// DeepSpeed's MiCS (Zhang et al. 2022; deepspeed/runtime/zero/mics.py, 0.19.6). MiCS_Init only
// swaps ZeRO-3's parameter all-gather (MiCS_AllGatherCoalescedHandle: all_gather_coalesced over
// the partition group, mics_utils.py create_mics_comm_groups: mics_shard_size consecutive
// ranks); fetching and releasing stay with ZeRO-3's
// PartitionedParameterCoordinator (reuse distance, persistence threshold, prefetch), and
// MiCS_Optimizer is DeepSpeed's ZeRO-3 optimizer: gradients reduce-scattered over the partition
// group in reduce_bucket_size buckets, then, at the gradient-accumulation boundary only,
// allreduce_mics_shard_grads all-reduces the partitions over the replica group as one
// all_reduce_coalesced. That is the default here: zero3's policy over the partition group
// (strategies/zero3.h). --mics-schedule per-unit is an FSDP2-style schedule instead
// (MicsPerUnit below, on strategies/param_groups.h): one flat group per wrap unit, released
// after forward, gathered again in backward and on recompute, one all-reduce per unit.
#include <memory>
#include <stdexcept>
#include <string>

#include "strategies/param_groups.h"
#include "strategies/zero3.h"

namespace sb {
namespace {

// Partition groups of mics_shard_size consecutive ranks (mics_utils.py
// create_mics_comm_groups), the partitions replicated across them.
StrategyDescription mics_description(Granularity g) {
  return fully_sharded("mics", "mics", GroupKind::kPartition, g, true);
}

class MicsPerUnit final : public ParamGroups {
 public:
  explicit MicsPerUnit(StrategyContext c)
      : ParamGroups(std::move(c), mics_description(Granularity::kUnit), GroupKind::kReplica,
                    false) {}

  // DeepSpeed's ZeRO-3 module hooks fire again on the recompute: the group is gathered for it
  // (the trace's next module is its own backward: no forward prefetch) and released after, as
  // after any forward, then gathered again for backward.
  void on_pre_recompute(int m) override {
    const int u = plan_.unit_of_module[m];
    all_gather(u);
    wait_unsharded(u);
  }
  void on_post_recompute(int m) override { on_post_forward(m); }

  // Released after each forward but the root's, which runs first and last.
  void on_post_forward(int m) override {
    const int u = plan_.unit_of_module[m];
    if (m != plan_.spans[u].last_fwd || u == plan_.root || S_ == 1) return;
    groups_[u].full.reset();
  }

  // Under accumulation as DeepSpeed's ZeRO-3 (stage3.py partition_grads: a reduce-scatter every
  // micro-batch, added into the partition's grad), the replica all-reduce only at
  // is_gradient_accumulation_boundary() (MiCS_Optimizer.allreduce_mics_shard_grads), on the
  // one stream.
  void on_post_backward(int m) override {
    const int u = plan_.unit_of_module[m];
    if (m == plan_.spans[u].last_bwd) reduce(u, CommStream::kMain);
  }

 protected:
  void configure() override {
    hierarchical_ = hierarchical_gather();
    // MiCS_Optimizer is DeepSpeed's ZeRO-3 optimizer: its IPG buffer (stage3.py, "# IPG") is
    // held all run, though this schedule reduces each unit from its own copy-in.
    if (ctx_.options.zero_contiguous_gradients)
      ipg_ = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, ctx_.options.grad_dtype(),
                         ctx_.options.bucket_elements());
  }

  // Block (l, j) of the output holds partition rank j·G + l (ParamShards::rank_of). The comm
  // stream runs the two in issue order, so the second reads what the first wrote.
  bool gather_in_two_levels(int u) override {
    if (!hierarchical_) return false;
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
    return true;
  }
  uint64_t gathered_node_size() const override {
    return hierarchical_ ? group_size(GroupKind::kIntra) : 0;
  }

 private:
  // mics_hierarchical_params_gather (MiCS_Init._hierarchical_all_gather_params): when the
  // partition spans whole nodes, an all-gather across them, then one inside the node.
  bool hierarchical_gather() const {
    if (!ctx_.options.mics_hierarchical_params_gather) return false;
    const int G = group_size(GroupKind::kIntra);
    if (S_ <= G || S_ % G != 0)
      throw std::invalid_argument("--mics-hierarchical-params-gather on: the partition of " +
                                  std::to_string(S_) + " must span whole nodes of " +
                                  std::to_string(G));
    return true;
  }

  bool hierarchical_ = false;
  TypedBuffer ipg_;  // ZeRO-3's contiguous_gradients buffer
};

std::unique_ptr<Strategy> make_mics(StrategyContext c) {
  if (c.options.mics_schedule == MicsSchedule::kPerUnit)
    return std::make_unique<MicsPerUnit>(std::move(c));
  // ZeRO-3's coordinator fetches batches of tensors; the two-level gather of whole nodes
  // (MiCS_Init._hierarchical_all_gather_params) is modelled for the per-unit schedule only.
  if (c.options.mics_hierarchical_params_gather)
    throw std::invalid_argument(
        "--mics-hierarchical-params-gather on: modelled with --mics-schedule per-unit only");
  return make_zero3(std::move(c), mics_description(Granularity::kTensor));
}

}  // namespace

void register_mics(std::vector<StrategyEntry>& out) {
  out.push_back({mics_description(Granularity::kTensor), make_mics});
}

}  // namespace sb
