// DeepSpeed's MiCS (Zhang et al. 2022; deepspeed/runtime/zero/mics.py, 0.19.6). MiCS_Init only
// swaps ZeRO-3's parameter all-gather (MiCS_AllGatherCoalescedHandle: all_gather_coalesced over
// the partition group, mics_utils.py create_mics_comm_groups: mics_shard_size consecutive
// ranks); fetching and releasing stay with ZeRO-3's PartitionedParameterCoordinator (reuse
// distance, persistence threshold, prefetch), and MiCS_Optimizer is DeepSpeed's ZeRO-3
// optimizer: gradients reduce-scattered over the partition group in reduce_bucket_size buckets,
// then, at the gradient-accumulation boundary only, allreduce_mics_shard_grads all-reduces the
// partitions over the replica group as one all_reduce_coalesced. That is the default here:
// zero3's policy over the partition group (strategies/zero3.h). --mics-schedule per-unit keeps
// the FSDP2-style schedule (strategies/fsdp2.cc): one flat group per wrap unit, released after
// forward, gathered again in backward and on recompute, one all-reduce per unit.
#include <stdexcept>

#include "strategies/zero3.h"

namespace sb {

namespace {

StrategyDescription mics_description() {
  StrategyDescription d;
  d.name = "mics";
  d.family = "mics";
  d.shards_params = d.shards_grads = d.shards_optimizer = true;
  d.shard_group = GroupKind::kPartition;
  d.replicate_across_nodes = true;
  d.granularity = Granularity::kTensor;
  return d;
}

std::unique_ptr<Strategy> make_mics(StrategyContext c) {
  if (c.options.mics_schedule == MicsSchedule::kPerUnit) return make_mics_per_unit(std::move(c));
  // ZeRO-3's coordinator fetches batches of tensors; the two-level gather of whole nodes
  // (MiCS_Init._hierarchical_all_gather_params) is modelled for the per-unit schedule only.
  if (c.options.mics_hierarchical_params_gather)
    throw std::invalid_argument(
        "--mics-hierarchical-params-gather on: modelled with --mics-schedule per-unit only");
  return make_zero3(std::move(c), mics_description());
}

}  // namespace

void register_mics(std::vector<StrategyEntry>& out) {
  out.push_back({mics_description(), make_mics});
}

}  // namespace sb
