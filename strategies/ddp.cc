// DDP: full replicas on every rank; gradients all-reduced in size-bounded buckets while
// backward is still running (PyTorch DDP's Reducer), then the same AdamW step everywhere.
#include <memory>

#include "strategies/buckets.h"
#include "strategies/strategy.h"

namespace sb {
namespace {

StrategyDescription ddp_description() {
  StrategyDescription d;
  d.name = "ddp";
  d.family = "ddp";
  d.shard_group = GroupKind::kWorld;
  d.granularity = Granularity::kBucket;
  return d;
}

class Ddp final : public Strategy {
 public:
  using Strategy::Strategy;
  const StrategyDescription& description() const override { return desc_; }

  void setup() override {
    const auto& o = ctx_.options;
    plan_ = plan_buckets(ctx_.model, tensors_in_grad_ready_order(ctx_.model),
                         o.bucket_elements(), 1);
    for (const FlatLayout& b : plan_.buckets) {
      params_.emplace_back(ctx_.memory, MemCategory::kParams, o.param_dtype(), b.padded);
      grads_.emplace_back(ctx_.memory, MemCategory::kGrads, o.grad_dtype(), b.padded);
      optim_.push_back(std::make_unique<ShardOptimizer>(ctx_.model, b, 0, b.padded,
                                                        o.param_dtype(), o.adamw, o.seed,
                                                        ctx_.device, ctx_.memory));
      optim_.back()->init_params(params_.back().data());
    }
    pending_.resize(plan_.buckets.size());
    left_ = plan_.tensors_left;
  }

  void on_post_backward(int m) override {
    for (int t : ctx_.model.modules[m].tensors) {
      if (ready_[t] != m) continue;
      const int b = plan_.bucket_of_tensor[t];
      if (--left_[b] == 0) {
        // after this all-reduce every rank holds the sum of all ranks' grads of the bucket
        pending_[b] = maybe_wait(ctx_.comm.all_reduce_async(
            grads_[b].data(), grads_[b].size(), grads_[b].dtype(), GroupKind::kWorld,
            "bucket" + std::to_string(b)));
      }
    }
  }

  void finish_backward() override {
    for (auto& h : pending_)
      if (h.valid()) h.wait();
    left_ = plan_.tensors_left;
  }

  void optimizer_step(int step) override {
    const float scale = 1.0f / float(world());  // the sum becomes the mean over ranks
    for (size_t b = 0; b < params_.size(); ++b) {
      optim_[b]->step(params_[b].data(), grads_[b].data(), grads_[b].dtype(), scale, step);
      ctx_.device.fill_zero(grads_[b].data(), grads_[b].bytes());
    }
  }

  std::vector<float> gather_full_params() override;
  uint64_t padded_params() const override { return plan_.padded_params(); }

 protected:
  std::pair<const void*, DType> param_storage(int t) override {
    const int b = plan_.bucket_of_tensor[t];
    return {params_[b].at(plan_.buckets[b].find(t)->offset), params_[b].dtype()};
  }
  std::pair<void*, DType> grad_storage(int t) override {
    const int b = plan_.bucket_of_tensor[t];
    return {grads_[b].at(plan_.buckets[b].find(t)->offset), grads_[b].dtype()};
  }

 private:
  StrategyDescription desc_ = ddp_description();
  BucketPlan plan_;
  std::vector<int> ready_ = ctx_.model.grad_ready_module();
  std::vector<int> left_;
  std::vector<TypedBuffer> params_, grads_;
  std::vector<std::unique_ptr<ShardOptimizer>> optim_;
  std::vector<CommHandle> pending_;
};

std::vector<float> Ddp::gather_full_params() {
  std::vector<float> out;
  for (size_t b = 0; b < params_.size(); ++b)
    flat_to_full(ctx_.model, plan_.buckets[b], params_[b].data(), params_[b].dtype(), ctx_.device,
                 out);
  return out;
}

}  // namespace

void register_ddp(std::vector<StrategyEntry>& out) {
  out.push_back({ddp_description(), [](StrategyContext c) -> std::unique_ptr<Strategy> {
                   return std::make_unique<Ddp>(std::move(c));
                 }});
}

}  // namespace sb
