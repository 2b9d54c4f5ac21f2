// ZeRO-1 and ZeRO-2 (Rajbhandari et al. 2020, §5.1–5.2; DeepSpeed stage 1/2): full parameters
// on every rank; optimizer state (and for ZeRO-2 the gradients) sharded over the world, rank r
// owning chunk r of every bucket (padded to N). Each gradient bucket is reduced as DeepSpeed
// ships it (stage_1_and_2.py average_tensor -> allreduce_and_scatter: one all-reduce of the
// bucket, each rank keeping its owned slice), with use_multi_rank_bucket_allreduce false (one
// reduce per owning rank: allreduce_no_retain(rank=dst)) or as the paper has it (a
// reduce-scatter); AdamW updates the owned chunks and an all-gather refreshes the full
// parameters. Stage 1 reduces after backward (reduce_gradients), stage 2 as each bucket
// completes in the backward hooks. Under gradient accumulation stage 1 reduces at the boundary
// only, stage 2 every micro-batch.
#include <algorithm>
#include <memory>

#include "strategies/accumulate.h"
#include "strategies/buckets.h"
#include "strategies/strategy.h"

namespace sb {
namespace {

StrategyDescription zero_description(int stage) {
  return {.name = "zero" + std::to_string(stage), .family = "zero", .shards_grads = stage >= 2,
          .shards_optimizer = true, .gather_after_step = true};
}

class Zero final : public ReplicatedBuckets {
 public:
  Zero(StrategyContext c, int stage)
      : ReplicatedBuckets(std::move(c)), desc_(zero_description(stage)) {}
  const StrategyDescription& description() const override { return desc_; }

  void setup() override {
    const auto& o = ctx_.options;
    const int n = world(), r = group_index(GroupKind::kWorld);
    plan_ = plan_buckets(ctx_.model, tensors_in_grad_ready_order(ctx_.model),
                         o.bucket_elements(), uint64_t(n));
    for (const FlatLayout& b : plan_.buckets) {
      const uint64_t chunk = b.shard_size(n);
      params_.emplace_back(ctx_.memory, MemCategory::kParams, o.param_dtype(), b.padded);
      if (stage() == 1) {
        grads_.emplace_back(ctx_.memory, MemCategory::kGrads, o.grad_dtype(), b.padded);
      } else {
        grad_shards_.emplace_back(ctx_.memory, MemCategory::kGrads, o.grad_dtype(), chunk);
        staging_.emplace_back();
        incoming_.emplace_back();
      }
      optim_.push_back(std::make_unique<ShardOptimizer>(ctx_.model, b, r * chunk, (r + 1) * chunk,
                                                        o.param_dtype(), o.adamw, o.seed,
                                                        ctx_.device, ctx_.memory));
      // Every rank initialises its own chunk; the first all-gather makes the replicas whole.
      optim_.back()->init_params(params_.back().at(r * chunk));
    }
    pending_.resize(plan_.buckets.size());
    left_ = plan_.tensors_left;
    gather_params();
  }

  // Gradient accumulation as DeepSpeed does it (stage_1_and_2.py
  // reduce_ready_partitions_and_remove_grads reduces when `partition_gradients or
  // is_gradient_accumulation_boundary()`): stage 1 lets the full local grads accumulate and
  // reduces at the boundary only; stage 2 reduces every micro-batch and adds the owned slice
  // into its grad partition (independent_gradient_partition_epilogue: accumulated_grad.add_).
  void begin_micro_step(bool sync) override { sync_ = sync; }

  void on_post_backward(int m) override {
    if (stage() == 1) return;  // stage 1 reduces after backward, from the full grads
    for (int t : ctx_.model.modules[m].tensors) {
      if (ready_[t] != m) continue;
      const int b = plan_.bucket_of_tensor[t];
      if (--left_[b] == 0) reduce_bucket(b, staging_[b].data());
    }
    release_finished_staging();
  }

  void finish_backward() override {
    if (stage() == 1 && !sync_) return;  // stage 1 accumulating: nothing was or is reduced
    if (stage() == 1) {
      for (size_t b = 0; b < plan_.buckets.size(); ++b) {
        if (!all_reduce())  // the reduce-scatter's output; an all-reduce works in place
          grad_shards_.emplace_back(ctx_.memory, MemCategory::kCommBuffers,
                                    ctx_.options.grad_dtype(), plan_.buckets[b].shard_size(world()));
        reduce_bucket(int(b), grads_[b].data());
      }
    }
    for (size_t b = 0; b < pending_.size(); ++b) {
      if (pending_[b].valid()) pending_[b].wait();
      if (stage() == 2 && !staging_[b].empty()) keep_owned_chunk(int(b));
      if (stage() == 2) staging_[b].reset();
      if (stage() == 2) land_incoming(int(b));
    }
    left_ = plan_.tensors_left;
    holds_sum_ = stage() == 2;  // a later micro-batch of this step adds into the partitions
  }

  void optimizer_step(int step) override {
    const float scale = mean_grad_scale();
    const int r = group_index(GroupKind::kWorld);
    for (size_t b = 0; b < plan_.buckets.size(); ++b) {
      const uint64_t chunk = plan_.buckets[b].shard_size(world());
      // Stage 1 with the all-reduce: the owned chunk is read in place from the full grads.
      const bool in_place = stage() == 1 && all_reduce();
      void* g = in_place ? grads_[b].at(r * chunk) : grad_shards_[b].data();
      optim_[b]->step(params_[b].at(r * chunk), g, ctx_.options.grad_dtype(), scale, step);
      if (stage() == 1) ctx_.device.fill_zero(grads_[b].data(), grads_[b].bytes());
    }
    if (stage() == 1) grad_shards_.clear();  // stage 1's shards were reduction outputs only
    holds_sum_ = false;
    gather_params();
  }

 protected:
  std::pair<void*, DType> grad_storage(int t) override {
    if (stage() == 1) return in_bucket(plan_, grads_, t);
    const int b = plan_.bucket_of_tensor[t];
    if (staging_[b].empty())  // the bucket's full grads live only until its reduce-scatter
      staging_[b] = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, ctx_.options.grad_dtype(),
                                plan_.buckets[b].padded);
    return in_bucket(plan_, staging_, t);
  }

 private:
  int stage() const { return desc_.shards_grads ? 2 : 1; }
  // Whether the bucket's reduction leaves the owned slice in the full buffer (all-reduce, or
  // reduce to each owner) rather than in a separate shard (reduce-scatter).
  bool all_reduce() const {
    return ctx_.options.zero_grad_reduce != ZeroGradReduce::kReduceScatter;
  }

  void reduce_bucket(int b, void* full) {
    const std::string tag = "bucket" + std::to_string(b);
    const DType dt = ctx_.options.grad_dtype();
    if (ctx_.options.zero_grad_reduce == ZeroGradReduce::kReducePerOwner) {
      reduce_to_owners(b, full, tag);
      return;
    }
    if (all_reduce()) {
      // DeepSpeed's allreduce_and_scatter: the bucket's elements, unpadded, as one all-reduce
      // (a bucket is <= reduce_bucket_size, so allreduce_and_scatter never splits it further).
      // after this all-reduce every rank holds the summed grads of the whole of bucket b
      pending_[b] = maybe_wait(
          ctx_.comm.all_reduce_async(full, plan_.buckets[b].numel, dt, GroupKind::kWorld, tag));
      return;
    }
    // Stage 2, a later micro-batch: reduce beside the partition, added in once it lands.
    TypedBuffer* out = &grad_shards_[b];
    if (holds_sum_) {
      incoming_[b] = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, dt, out->size());
      out = &incoming_[b];
    }
    // after this reduce-scatter each rank holds the summed grads of its chunk of bucket b
    pending_[b] = maybe_wait(ctx_.comm.reduce_scatter_async(full, out->data(), out->size(), dt,
                                                            GroupKind::kWorld, tag));
  }

  // use_multi_rank_bucket_allreduce false (average_tensor groups the bucket's slices by owner,
  // then allreduce_no_retain(rank=dst) -> allreduce_bucket -> dist.reduce): one reduce per
  // rank owning real elements of the bucket, in bucket order, of its slice without padding (a
  // bucket is <= reduce_bucket_size, so no reduce is split). Waiting on the last waits on all:
  // the comm stream runs them in issue order.
  void reduce_to_owners(int b, void* full, const std::string& tag) {
    const FlatLayout& bucket = plan_.buckets[b];
    const uint64_t chunk = bucket.shard_size(world());
    const DType dt = ctx_.options.grad_dtype();
    for (int owner = 0; owner < world(); ++owner) {
      const uint64_t begin = uint64_t(owner) * chunk;
      if (begin >= bucket.numel) break;
      const uint64_t len = std::min(chunk, bucket.numel - begin);
      void* slice = static_cast<char*>(full) + begin * dtype_bytes(dt);
      // after this reduce rank `owner` holds the summed grads of its slice of bucket b
      pending_[b] = maybe_wait(
          ctx_.comm.reduce_async(slice, len, dt, owner, GroupKind::kWorld, tag));
    }
  }

  // A later micro-batch's reduce-scattered chunk, added into the partition.
  void land_incoming(int b) {
    if (incoming_[b].empty()) return;
    add_grads(ctx_.device, ctx_.memory, grad_shards_[b].data(), incoming_[b].data(),
              grad_shards_[b].size(), grad_shards_[b].dtype());
    incoming_[b].reset();
  }

  // Stage 2 with the all-reduce: keep the owned slice of the reduced bucket (added to the
  // partition's sum on a later micro-batch), drop the rest.
  void keep_owned_chunk(int b) {
    if (!all_reduce()) return;
    const uint64_t chunk = plan_.buckets[b].shard_size(world());
    const void* owned = staging_[b].at(uint64_t(group_index(GroupKind::kWorld)) * chunk);
    if (holds_sum_)
      add_grads(ctx_.device, ctx_.memory, grad_shards_[b].data(), owned, chunk,
                grad_shards_[b].dtype());
    else
      ctx_.device.copy(grad_shards_[b].data(), owned, grad_shards_[b].bytes());
  }

  void release_finished_staging() {
    for (size_t b = 0; b < staging_.size(); ++b)
      if (!staging_[b].empty() && left_[b] == 0 && pending_[b].valid() && pending_[b].done()) {
        keep_owned_chunk(int(b));
        staging_[b].reset();
        land_incoming(int(b));
      }
  }

  void gather_params() {
    const int r = group_index(GroupKind::kWorld);
    std::vector<TypedBuffer> sends;
    std::vector<CommHandle> handles;
    for (size_t b = 0; b < plan_.buckets.size(); ++b) {
      const uint64_t chunk = plan_.buckets[b].shard_size(world());
      // The owned chunk is staged so the gather never reads what it is writing.
      sends.emplace_back(ctx_.memory, MemCategory::kCommBuffers, params_[b].dtype(), chunk);
      ctx_.device.copy(sends.back().data(), params_[b].at(r * chunk), sends.back().bytes());
      // after this all-gather every rank holds the updated full parameters of bucket b
      handles.push_back(maybe_wait(ctx_.comm.all_gather_async(
          sends.back().data(), params_[b].data(), chunk, params_[b].dtype(), GroupKind::kWorld,
          "bucket" + std::to_string(b))));
    }
    for (auto& h : handles) h.wait();
  }

  StrategyDescription desc_;
  std::vector<int> ready_ = ctx_.model.grad_ready_module();
  std::vector<int> left_;
  std::vector<TypedBuffer> grads_, grad_shards_, staging_, incoming_;
  std::vector<std::unique_ptr<ShardOptimizer>> optim_;
  std::vector<CommHandle> pending_;
  bool sync_ = true;  // stage 1: this micro-batch reduces (always, without accumulation)
  bool holds_sum_ = false;  // stage 2: the grad partitions hold this step's sum so far
};

}  // namespace

void register_zero(std::vector<StrategyEntry>& out) {
  for (int stage : {1, 2}) {
    out.push_back({zero_description(stage), [stage](StrategyContext c) -> std::unique_ptr<Strategy> {
                     return std::make_unique<Zero>(std::move(c), stage);
                   }});
  }
}

}  // namespace sb
