// ZeRO-3's policy over a shard group of the caller's choosing (strategies/zero3.cc): the world
// for zero3; MiCS's partition group, with the replica all-reduce, for mics (strategies/mics.cc).
// ZeRO++ (strategies/zeropp.cc) derives from it.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "strategies/strategy.h"
#include "strategies/zero3_params.h"

namespace sb {

// d.shard_group partitions every tensor; d.replicate_across_nodes adds the all-reduce of the grad
// partitions over GroupKind::kReplica at the accumulation boundary. ZeRO-3 with whichever ZeRO++
// knobs are set (strategies/zeropp.cc).
std::unique_ptr<Strategy> make_zero3(StrategyContext c, StrategyDescription d);

class Zero3 : public Strategy {
 public:
  Zero3(StrategyContext c, StrategyDescription desc)
      : Strategy(std::move(c)), desc_(std::move(desc)) {}
  const StrategyDescription& description() const override { return desc_; }

  void setup() override;
  void begin_step() override;
  void begin_micro_step(bool sync) override;
  void on_pre_forward(int m) override { params_->fetch(m); }
  void on_pre_backward(int m) override { params_->fetch(m); }
  void on_post_forward(int m) override;
  void on_post_backward(int m) override;
  void finish_backward() override;
  void optimizer_step(int step) override;
  std::vector<float> gather_full_params() override;
  uint64_t padded_params() const override;

 protected:
  // A gradient reduction in flight: the tensors whose partitions it yields, back to back in
  // `out`, once wait() returns.
  struct Reduction {
    std::vector<int> tensors;
    TypedBuffer staging, out;
    CommHandle handle;
    virtual ~Reduction() = default;
    virtual bool done() const { return handle.done(); }
    virtual void wait() { handle.wait(); }
  };

  // ZeRO++'s hooks: the parameters' gathers, and the reductions of a full bucket.
  virtual std::unique_ptr<PartitionedParams> make_params();
  virtual void reduce_bucket();

  std::pair<const void*, DType> param_storage(int t) override;
  std::pair<void*, DType> grad_storage(int t) override;
  const void* grad_of(int t, uint64_t at = 0) const;
  std::unique_ptr<Reduction> bucket_reduction();
  GroupKind shard() const { return desc_.shard_group; }

  std::unique_ptr<PartitionedParams> params_;
  std::vector<TypedBuffer> grad_full_;  // per tensor: its full gradient, until its bucket flushes
  std::vector<int> bucket_;
  std::deque<std::unique_ptr<Reduction>> reductions_;

 private:
  void to_ipg(int t);
  void flush_bucket();
  void reap_reductions(bool all);
  void all_reduce_replicas();

  StrategyDescription desc_;
  bool sync_ = true;  // this micro-batch ends the accumulation
  std::vector<int> ready_ = ctx_.model.grad_ready_module();
  std::vector<TypedBuffer> grad_shards_;
  TypedBuffer ipg_;               // contiguous_gradients' IPG buffer (empty: off)
  std::vector<uint64_t> ipg_at_;  // per tensor: where its gradient sits in it
  std::vector<std::unique_ptr<ShardOptimizer>> optim_;
  int micro_ = 0;           // micro-batches started in this step
  bool holds_sum_ = false;  // the grad partitions hold this step's sum so far
  uint64_t bucket_elems_ = 0;
};

}  // namespace sb
