// Per-parameter shard groups: layout, gathers, reductions (see header).
#include "strategies/param_groups.h"

#include "strategies/accumulate.h"

namespace sb {

void ParamGroups::setup() {
  const auto& o = ctx_.options;
  S_ = group_size(desc_.shard_group);
  const int r = group_index(desc_.shard_group);
  configure();
  plan_ = FsdpPlan::build(ctx_.model, o.wrap);
  groups_.resize(plan_.unit_tensors.size());
  for (size_t u = 0; u < groups_.size(); ++u) {
    Group& G = groups_[u];
    G.layout = ParamShards::build(ctx_.model, plan_.unit_tensors[u], S_, rows_);
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

void ParamGroups::optimizer_step(int step) {
  const float scale = mean_grad_scale();
  for (Group& G : groups_) {
    G.holds_sum = false;
    for (size_t i = 0; i < G.optims.size(); ++i) {
      const uint64_t at = G.layout.params[i].shard_off;
      G.optims[i]->step(G.shard.at(at), G.grad_shard.at(at), G.grad_shard.dtype(), scale, step);
    }
  }
}

std::vector<float> ParamGroups::gather_full_params() {
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

uint64_t ParamGroups::padded_params() const {
  uint64_t n = 0;
  for (const Group& G : groups_) n += G.layout.padded();
  return n;
}

std::pair<const void*, DType> ParamGroups::param_storage(int t) {
  Group& G = groups_[plan_.unit_of_tensor[t]];
  return {G.full.at(G.layout.find(t).full_off), G.full.dtype()};
}

std::pair<void*, DType> ParamGroups::grad_storage(int t) {
  Group& G = groups_[plan_.unit_of_tensor[t]];
  // Unsharded grads live from the group's backward to the copy-in. Kept across micro-batches
  // they are held in reduce_dtype (FSDPParam.to_accumulated_grad_if_needed).
  if (G.full_grad.empty())
    G.full_grad = TypedBuffer(ctx_.memory, MemCategory::kGrads,
                              keep_grads_ ? reduce_dtype() : ctx_.options.grad_dtype(),
                              G.layout.padded());
  return {G.full_grad.at(G.layout.find(t).full_off), G.full_grad.dtype()};
}

void ParamGroups::unshard(int m, int dir, int first_module) {
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
void ParamGroups::all_gather(int u) {
  Group& G = groups_[u];
  if (!G.full.empty() || G.gather.valid()) return;
  const bool node = !G.post_forward.empty();
  const GroupKind over = node ? GroupKind::kIntra : desc_.shard_group;
  TypedBuffer& in = node ? G.post_forward : G.shard;
  G.gather_out =
      TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, G.shard.dtype(), G.layout.padded());
  if (gather_in_two_levels(u)) return;
  void* mine = G.gather_out.at(uint64_t(group_index(over)) * in.size());
  ctx_.device.copy(mine, in.data(), in.bytes());
  const size_t count = in.size();
  G.post_forward.reset();
  // after this all-gather every rank of `over` holds the group's S rank blocks in order
  G.gather = maybe_wait(ctx_.comm.all_gather_async(
      mine, G.gather_out.data(), count, G.shard.dtype(), over, "group" + std::to_string(u)));
}

// Wait for the group's all-gather, then copy-out into the unsharded parameters.
void ParamGroups::wait_unsharded(int u) {
  Group& G = groups_[u];
  if (!G.gather.valid()) return;
  G.gather.wait();
  if (G.gather_first.valid()) G.gather_first.wait();
  G.gather = G.gather_first = CommHandle();
  G.full = TypedBuffer(ctx_.memory, MemCategory::kGatheredParams, G.shard.dtype(),
                       G.gather_out.size());
  G.layout.copy(ctx_.device, G.full.data(), G.gather_out.data(), dtype_bytes(G.full.dtype()), 0,
                G.layout.shards, true, gathered_node_size());
  G.gather_out.reset();
}

// `grads` cast to `to` in a workspace, or nothing when it is already of that dtype.
TypedBuffer ParamGroups::grads_in(const TypedBuffer& grads, DType to) {
  if (grads.dtype() == to) return {};
  TypedBuffer out(ctx_.memory, MemCategory::kWorkspace, to, grads.size());
  ctx_.device.bf16_to_f32(static_cast<float*>(out.data()),
                          static_cast<const uint16_t*>(grads.data()), grads.size());
  return out;
}

void ParamGroups::reduce(int u, CommStream stream) {
  Group& G = groups_[u];
  // foreach_reduce: the unsharded grads cast to reduce_dtype (_to_dtype_if_needed), then
  // copy-in into one flat buffer, rank by rank
  TypedBuffer cast = grads_in(G.full_grad, reduce_dtype());
  G.reduce_in =
      TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, reduce_dtype(), G.layout.padded());
  G.layout.copy(ctx_.device, cast.empty() ? G.full_grad.data() : cast.data(), G.reduce_in.data(),
                dtype_bytes(G.reduce_in.dtype()), 0, G.layout.shards, false);
  G.full_grad.reset();
  G.full.reset();  // the root too: resharded after backward
  // Under accumulation (MiCS) the shard's sum of earlier micro-batches goes into this rank's own
  // block of the input, so the reduce-scatter returns it plus this micro-batch's sum.
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
  if (sync_ && desc_.replicate_across_nodes && group_size(replicas_) > 1) {
    // after this all-reduce (HSDP's replicate dim; MiCS_Optimizer.allreduce_mics_shard_grads)
    // the shard also sums every replica's
    G.reduce = maybe_wait(ctx_.comm.all_reduce_async(G.grad_shard.data(), G.chunk(),
                                                     G.grad_shard.dtype(), replicas_, tag, stream,
                                                     G.reduce));
  }
  reducing_.push_back(u);
  reap(false);
}

// Free the reduce-scatter inputs of groups whose reduction has finished.
void ParamGroups::reap(bool all) {
  reap_units(reducing_, groups_, all, [](Group& G) { G.reduce_in.reset(); });
}

}  // namespace sb
