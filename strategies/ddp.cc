// DDP: full replicas on every rank; gradients all-reduced in size-bounded buckets while
// backward is still running, then the same AdamW step everywhere. As PyTorch 1.13.1 ships it
// (torch/nn/parallel/distributed.py, torch/csrc/distributed/c10d/reducer.cpp): the Reducer's
// bucket assignment (first bucket 1 MiB, then bucket_cap_mb), the bucket as a second copy of
// the gradients unless gradient_as_bucket_view, and under autocast fp32 params, grads and
// all-reduce (autocast casts operands for compute only; the parameters stay fp32).
#include <algorithm>
#include <memory>

#include "strategies/buckets.h"
#include "strategies/strategy.h"

namespace sb {
namespace {

StrategyDescription ddp_description() { return {.name = "ddp", .family = "ddp"}; }

class Ddp final : public ReplicatedBuckets {
 public:
  using ReplicatedBuckets::ReplicatedBuckets;
  const StrategyDescription& description() const override { return desc_; }

  void setup() override {
    const auto& o = ctx_.options;
    // bf16-mixed is autocast unless the model itself was cast (bf16_params): see the header.
    dtype_ = o.ddp.bf16_params ? o.param_dtype() : DType::kF32;
    const auto elements = [&](double mb) {
      return std::max<uint64_t>(1, uint64_t(mb * 1024 * 1024 / double(dtype_bytes(dtype_))));
    };
    // DistributedDataParallel._ddp_init_helper / Reducer::rebuild_buckets: from the second
    // iteration on, buckets follow the order gradients became ready, with limits
    // [_DEFAULT_FIRST_BUCKET_BYTES, bucket_bytes_cap]; that steady state is what runs here.
    const double cap_mb = o.ddp.bucket_cap_mb > 0 ? o.ddp.bucket_cap_mb : o.bucket_mb;
    plan_ = plan_reducer_buckets(ctx_.model, autograd_ready_order(ctx_.model),
                                 elements(o.ddp.first_bucket_mb), elements(cap_mb));
    for (const FlatLayout& b : plan_.buckets) {
      params_.emplace_back(ctx_.memory, MemCategory::kParams, dtype_, b.padded);
      grads_.emplace_back(ctx_.memory, MemCategory::kGrads, dtype_, b.padded);
      // Reducer::initialize_buckets: the bucket's flat tensor; with gradient_as_bucket_view
      // the .grad tensors are views into it, otherwise it is a second buffer (+Ψ·b_g).
      if (!o.ddp.gradient_as_bucket_view)
        buckets_.emplace_back(ctx_.memory, MemCategory::kCommBuffers, dtype_, b.padded);
      optim_.push_back(std::make_unique<ShardOptimizer>(ctx_.model, b, 0, b.padded, dtype_,
                                                        o.adamw, o.seed, ctx_.device,
                                                        ctx_.memory));
      optim_.back()->init_params(params_.back().data());
    }
    pending_.resize(plan_.buckets.size());
    left_ = plan_.tensors_left;
  }

  // Gradient accumulation as DDP.no_sync() (distributed.py: require_backward_grad_sync=False
  // skips Reducer::prepare_for_backward, so no bucket is reduced): every micro-batch but the last
  // only accumulates into the local .grad; the last reduces the sums.
  void begin_micro_step(bool sync) override { sync_ = sync; }

  void on_post_backward(int m) override {
    if (!sync_) return;
    // Last to first, as autograd fires the hooks (autograd_ready_order), so buckets that
    // complete in the same module launch in bucket order, as Reducer::mark_bucket_ready does.
    const std::vector<int>& tensors = ctx_.model.modules[m].tensors;
    for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) {
      const int t = *it;
      if (ready_[t] != m) continue;
      const int b = plan_.bucket_of_tensor[t];
      if (--left_[b] != 0) continue;
      TypedBuffer& bucket = reduced(b);
      // Reducer::mark_variable_ready_dense: the grads are copied into the bucket (no copy when
      // they are views of it).
      if (&bucket != &grads_[b]) ctx_.device.copy(bucket.data(), grads_[b].data(), bucket.bytes());
      // after this all-reduce every rank holds the sum of all ranks' grads of the bucket
      pending_[b] = maybe_wait(ctx_.comm.all_reduce_async(
          bucket.data(), bucket.size(), bucket.dtype(), GroupKind::kWorld,
          "bucket" + std::to_string(b)));
    }
  }

  void finish_backward() override {
    if (!sync_) return;
    for (size_t b = 0; b < pending_.size(); ++b) {
      if (pending_[b].valid()) pending_[b].wait();
      // Reducer::finalize_bucket_dense → copy_bucket_to_grad: the reduced bucket back into .grad
      TypedBuffer& bucket = reduced(int(b));
      if (&bucket != &grads_[b]) ctx_.device.copy(grads_[b].data(), bucket.data(), bucket.bytes());
    }
    left_ = plan_.tensors_left;
  }

  void optimizer_step(int step) override {
    const float scale = mean_grad_scale();  // the sum becomes the mean over ranks, micro-batches
    for (size_t b = 0; b < params_.size(); ++b) {
      optim_[b]->step(params_[b].data(), grads_[b].data(), grads_[b].dtype(), scale, step);
      ctx_.device.fill_zero(grads_[b].data(), grads_[b].bytes());
    }
  }

 protected:
  std::pair<void*, DType> grad_storage(int t) override { return in_bucket(plan_, grads_, t); }

 private:
  // The buffer bucket b is all-reduced in: the grads themselves when they are bucket views.
  TypedBuffer& reduced(int b) { return buckets_.empty() ? grads_[b] : buckets_[b]; }

  StrategyDescription desc_ = ddp_description();
  DType dtype_ = DType::kF32;  // params and grads as stored
  std::vector<int> ready_ = ctx_.model.grad_ready_module();
  std::vector<int> left_;
  std::vector<TypedBuffer> grads_, buckets_;
  std::vector<std::unique_ptr<ShardOptimizer>> optim_;
  std::vector<CommHandle> pending_;
  bool sync_ = true;  // this micro-batch reduces (always, without accumulation)
};

}  // namespace

void register_ddp(std::vector<StrategyEntry>& out) {
  out.push_back({ddp_description(), [](StrategyContext c) -> std::unique_ptr<Strategy> {
                   return std::make_unique<Ddp>(std::move(c));
                 }});
}

}  // namespace sb
