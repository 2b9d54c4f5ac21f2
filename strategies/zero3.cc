// ZeRO-3 (Rajbhandari et al. 2020 §5.3; DeepSpeed stage 3): every parameter tensor is
// partitioned on its own over the world. Before each leaf module its tensors are all-gathered
// (as shipped one coalesced all-gather per fetch batch, the paper's schedule one per tensor),
// later modules' gathers prefetched within --prefetch-elements and --max-live-elements; freed
// after the module, gathered again in backward. Tensors of at most --persist-elements (within
// --model-persist-elements in all) stay whole on every rank (no gather; refreshed after the
// step). As DeepSpeed ships it (partitioned_param_coordinator.py __params_to_release), a tensor
// used again within reuse_distance elements of the recorded trace is not released after a
// module; the first step records the trace and releases everything. Reuse distance 0 = the
// paper's. Fetching and releasing: strategies/zero3_params.h.
// Gradients are reduce-scattered in buckets of --bucket-mb: each bucket is staged as N blocks
// (block r = rank r's partitions of the bucket's tensors), one reduce-scatter each. Under
// gradient accumulation every micro-batch gathers and reduce-scatters as a step does, and the
// reduced partitions are summed (stage3.py partition_grads: copy at micro_step_id 0, add_
// after); the trace is reset at every forward (parameter_offload.py _start_of_forward_hook).
// ZeRO++ (hpZ, qwZ, qgZ) derives from this policy: strategies/zeropp.cc.
#include "strategies/zero3.h"

#include "strategies/accumulate.h"

namespace sb {

void Zero3::setup() {
  const auto& o = ctx_.options;
  const int n = group_size(shard()), r = group_index(shard());
  const size_t nt = ctx_.model.tensors.size();
  params_ = make_params();
  grad_shards_.resize(nt);
  grad_full_.resize(nt);
  params_->setup([&](int t) {
    const uint64_t part = params_->flat(t).shard_size(n);
    grad_shards_[t] = TypedBuffer(ctx_.memory, MemCategory::kGrads, o.grad_dtype(), part);
    optim_.push_back(std::make_unique<ShardOptimizer>(ctx_.model, params_->flat(t), r * part,
                                                      (r + 1) * part, o.param_dtype(), o.adamw,
                                                      o.seed, ctx_.device, ctx_.memory));
    optim_.back()->init_params(params_->shard(t).data());
  });
  // stage3.py __init__ "# IPG": with contiguous_gradients the reduce_bucket_size buffer of the
  // communication dtype is allocated here and held for the whole run.
  if (o.zero_contiguous_gradients)
    ipg_ = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, o.grad_dtype(),
                       o.bucket_elements());
  ipg_at_.assign(nt, 0);
}

std::unique_ptr<PartitionedParams> Zero3::make_params() {
  return std::make_unique<PartitionedParams>(ctx_, shard());
}

void Zero3::begin_step() {
  params_->begin_pass();
  micro_ = 0;
}

void Zero3::begin_micro_step(bool sync) {
  sync_ = sync;
  if (micro_++ == 0) return;  // begin_step started the first one
  params_->begin_pass();
}

void Zero3::on_post_forward(int m) {
  params_->release(m);
  reap_reductions(false);
}

void Zero3::on_post_backward(int m) {
  on_post_forward(m);
  if (params_->at_trace_end()) params_->release_all();  // DeepSpeed's end-of-step release
  for (int t : ctx_.model.modules[m].tensors) {
    if (ready_[t] != m) continue;
    to_ipg(t);
    bucket_.push_back(t);
    bucket_elems_ += params_->flat(t).padded;
    if (bucket_elems_ >= ctx_.options.bucket_elements()) flush_bucket();
  }
}

void Zero3::finish_backward() {
  flush_bucket();
  reap_reductions(true);
  holds_sum_ = true;  // a later micro-batch of this step adds into the partitions
  if (sync_ && desc_.replicate_across_nodes) all_reduce_replicas();
}

void Zero3::optimizer_step(int step) {
  holds_sum_ = false;
  const float scale = mean_grad_scale();
  for (size_t t = 0; t < optim_.size(); ++t)
    optim_[t]->step(params_->shard(int(t)).data(), grad_shards_[t].data(),
                    grad_shards_[t].dtype(), scale, step);
  params_->after_step();
}

std::vector<float> Zero3::gather_full_params() {
  std::vector<float> out;
  for (size_t t = 0; t < params_->size(); ++t) {
    const TypedBuffer& shard = params_->shard(int(t));
    TypedBuffer full(ctx_.memory, MemCategory::kWorkspace, shard.dtype(),
                     params_->flat(int(t)).padded);
    ctx_.comm.all_gather(shard.data(), full.data(), shard.size(), full.dtype(), this->shard());
    flat_to_full(ctx_.model, params_->flat(int(t)), full.data(), full.dtype(), ctx_.device, out);
  }
  return out;
}

uint64_t Zero3::padded_params() const {
  uint64_t n = 0;
  for (size_t t = 0; t < params_->size(); ++t) n += params_->flat(int(t)).padded;
  return n;
}

std::pair<const void*, DType> Zero3::param_storage(int t) {
  const TypedBuffer& full = params_->whole(t);
  return {full.data(), full.dtype()};
}

std::pair<void*, DType> Zero3::grad_storage(int t) {
  if (grad_full_[t].empty())  // the full grad lives from its first use until its bucket flushes
    grad_full_[t] = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, ctx_.options.grad_dtype(),
                                params_->flat(t).padded);
  return {grad_full_[t].data(), grad_full_[t].dtype()};
}

// __add_grad_to_ipg_bucket: a gradient that fits what is left of the IPG buffer is copied into
// it and its own storage freed (param.grad becomes the view); one that does not keeps its own.
void Zero3::to_ipg(int t) {
  const uint64_t n = params_->flat(t).padded;
  if (ipg_.empty() || grad_full_[t].empty() || bucket_elems_ + n > ipg_.size()) return;
  ctx_.device.copy(ipg_.at(bucket_elems_), grad_full_[t].data(), grad_full_[t].bytes());
  ipg_at_[t] = bucket_elems_;
  grad_full_[t].reset();
}

// Tensor t's full gradient, element `at` on: in its own buffer or in the IPG buffer.
const void* Zero3::grad_of(int t, uint64_t at) const {
  return grad_full_[t].empty() ? ipg_.at(ipg_at_[t] + at) : grad_full_[t].at(at);
}

void Zero3::flush_bucket() {
  if (bucket_.empty()) return;
  reduce_bucket();
  bucket_.clear();
  bucket_elems_ = 0;
  reap_reductions(false);
}

void Zero3::reduce_bucket() { reductions_.push_back(bucket_reduction()); }

// One reduce-scatter of the bucket, staged as N blocks (block q = every tensor's partition q).
std::unique_ptr<Zero3::Reduction> Zero3::bucket_reduction() {
  const int n = group_size(shard());
  uint64_t block = 0;
  for (int t : bucket_) block += params_->flat(t).shard_size(n);
  auto red = std::make_unique<Reduction>();
  red->tensors = bucket_;
  red->staging = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, ctx_.options.grad_dtype(),
                             block * n);
  red->out = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, ctx_.options.grad_dtype(), block);
  const size_t eb = dtype_bytes(red->staging.dtype());
  for (int q = 0; q < n; ++q) {  // block q = every tensor's partition q, back to back
    uint64_t at = uint64_t(q) * block;
    for (int t : bucket_) {
      const uint64_t part = params_->flat(t).shard_size(n);
      ctx_.device.copy(red->staging.at(at), grad_of(t, q * part), part * eb);
      at += part;
    }
  }
  for (int t : bucket_) grad_full_[t].reset();
  // after this reduce-scatter each rank holds the summed grads of its partitions
  red->handle = maybe_wait(ctx_.comm.reduce_scatter_async(
      red->staging.data(), red->out.data(), block, red->out.dtype(), shard(), "grad_bucket"));
  return red;
}

// Copy finished reductions into the grad shards and free their staging.
void Zero3::reap_reductions(bool all) {
  while (!reductions_.empty() && (all || reductions_.front()->done())) {
    Reduction& red = *reductions_.front();
    red.wait();
    uint64_t at = 0;
    const size_t eb = dtype_bytes(red.out.dtype());
    for (int t : red.tensors) {
      if (holds_sum_)
        add_grads(ctx_.device, ctx_.memory, grad_shards_[t].data(), red.out.at(at),
                  grad_shards_[t].size(), grad_shards_[t].dtype());
      else
        ctx_.device.copy(grad_shards_[t].data(), red.out.at(at), grad_shards_[t].size() * eb);
      at += grad_shards_[t].size();
    }
    reductions_.pop_front();
  }
}

// MiCS_Optimizer.allreduce_mics_shard_grads (mics.py): at the accumulation boundary every
// grad partition is all-reduced over the replica group, one all_reduce_coalesced (flattened).
void Zero3::all_reduce_replicas() {
  if (group_size(GroupKind::kReplica) < 2) return;
  uint64_t n = 0;
  for (const TypedBuffer& g : grad_shards_) n += g.size();
  const DType dt = ctx_.options.grad_dtype();
  TypedBuffer flat(ctx_.memory, MemCategory::kCommBuffers, dt, n);
  uint64_t at = 0;
  for (const TypedBuffer& g : grad_shards_) {
    ctx_.device.copy(flat.at(at), g.data(), g.bytes());
    at += g.size();
  }
  // after this all-reduce every partition also sums the other replicas' gradients
  ctx_.comm.all_reduce(flat.data(), n, dt, GroupKind::kReplica, "replica_grads");
  at = 0;
  for (TypedBuffer& g : grad_shards_) {
    ctx_.device.copy(g.data(), flat.at(at), g.bytes());
    at += g.size();
  }
}

void register_zero3(std::vector<StrategyEntry>& out) {
  const StrategyDescription d =
      fully_sharded("zero3", "zero", GroupKind::kWorld, Granularity::kTensor);
  out.push_back({d, [d](StrategyContext c) { return make_zero3(std::move(c), d); }});
}

}  // namespace sb
