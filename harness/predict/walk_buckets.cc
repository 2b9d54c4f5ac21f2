// Walks of the bucketed strategies, hook for hook as strategies/ddp.cc and zero.cc: the same
// plan_buckets in gradient-ready order (padded to 1 for DDP, to N for ZeRO), the same buffers
// by category, the same collectives. DDP: all-reduce per bucket in backward. ZeRO-1: full
// grads, reduce-scatter after backward. ZeRO-2: per-bucket staging, reduce-scatter in
// backward. Both ZeRO stages all-gather the updated params after the step. The bucket
// grouping is plan_buckets' (cached per cap); each bucket pads to N as FlatLayout::build does.
#include <deque>
#include <vector>

#include "harness/predict/walk.h"
#include "strategies/buckets.h"

namespace sb {
namespace {

class BucketWalk final : public StrategyWalk {
 public:
  using StrategyWalk::StrategyWalk;

  void setup() override {
    const StrategyDescription& d = env_.desc;
    zero_ = d.shards_optimizer;
    stage_ = d.shards_grads ? 2 : 1;
    n_ = zero_ ? env_.world : 1;
    plan_ = env_.shape.buckets(env_.opt.bucket_elements());
    const size_t nb = plan_->buckets.size();
    padded_.resize(nb);
    for (size_t b = 0; b < nb; ++b) {
      padded_[b] = round_up(plan_->buckets[b].numel, uint64_t(n_));
      const uint64_t chunk = padded_[b] / uint64_t(n_);
      if (!zero_)
        env_.alloc_state(padded_[b], padded_[b], padded_[b]);
      else
        env_.alloc_state(padded_[b], stage_ == 1 ? padded_[b] : chunk, chunk);
    }
    left_ = plan_->tensors_left;
    staging_.assign(nb, false);
  }

  void grad_storage(int t) override {
    if (!zero_ || stage_ == 1) return;  // DDP and ZeRO-1 keep full grads at rest
    const int b = plan_->bucket_of_tensor[t];
    if (staging_[b]) return;
    staging_[b] = true;  // the bucket's full grads live until its reduce-scatter is done
    env_.mem.alloc(MemCategory::kCommBuffers, env_.bg() * padded_[b]);
  }

  void post_backward(int m) override {
    if (zero_ && stage_ == 1) return;
    for (int t : env_.shape.ready_at[m]) {
      const int b = plan_->bucket_of_tensor[t];
      if (--left_[b] != 0) continue;
      // DDP: all-reduce of the bucket; ZeRO-2: reduce-scatter into each rank's chunk
      env_.call(zero_ ? CollKind::kReduceScatter : CollKind::kAllReduce, GroupKind::kWorld,
                padded_[b], env_.gdt());
      if (zero_) completed_.push_back({b, env_.clock});
    }
    if (zero_) release_finished_staging();
  }

  void finish_backward() override {
    if (zero_ && stage_ == 1) {
      for (uint64_t p : padded_) {
        env_.mem.alloc(MemCategory::kCommBuffers, env_.bg() * (p / uint64_t(n_)));
        env_.call(CollKind::kReduceScatter, GroupKind::kWorld, p, env_.gdt());
      }
    }
    for (size_t b = 0; b < staging_.size(); ++b) free_staging(b);
    completed_.clear();
    left_ = plan_->tensors_left;
  }

  void optimizer_step() override {
    for (uint64_t p : padded_) env_.optimizer_shard(p / uint64_t(n_));
    if (!zero_) return;
    uint64_t shards = 0;
    for (uint64_t p : padded_) shards += p / uint64_t(n_);
    if (stage_ == 1) env_.mem.free(MemCategory::kCommBuffers, env_.bg() * shards);
    // gather_params: each owned chunk staged, then one all-gather per bucket
    for (uint64_t p : padded_) {
      env_.mem.alloc(MemCategory::kCommBuffers, env_.bp() * (p / uint64_t(n_)));
      env_.call(CollKind::kAllGather, GroupKind::kWorld, p, env_.pdt());
    }
    env_.mem.free(MemCategory::kCommBuffers, env_.bp() * shards);
  }

  uint64_t padded_params() const override {
    uint64_t s = 0;
    for (uint64_t p : padded_) s += p;
    return s;
  }

 private:
  void free_staging(size_t b) {
    if (!staging_[b]) return;
    staging_[b] = false;
    env_.mem.free(MemCategory::kCommBuffers, env_.bg() * padded_[b]);
  }
  // zero.cc frees, at every post_backward, the staging of each complete bucket whose
  // reduce-scatter is done; completion follows issue order, so the done ones are a prefix.
  void release_finished_staging() {
    while (!completed_.empty() && env_.done(completed_.front().issued_at)) {
      free_staging(size_t(completed_.front().bucket));
      completed_.pop_front();
    }
  }

  struct Completed {
    int bucket, issued_at;
  };
  bool zero_ = false;
  int stage_ = 1, n_ = 1;
  std::shared_ptr<const BucketPlan> plan_;
  std::vector<uint64_t> padded_;
  std::vector<int> left_;
  std::vector<bool> staging_;
  std::deque<Completed> completed_;
};

}  // namespace

std::unique_ptr<StrategyWalk> make_bucket_walk(WalkEnv& env) {
  return std::make_unique<BucketWalk>(env);
}

}  // namespace sb
