// ZeRO++ (Wang et al. 2023; DeepSpeed 0.19.6 zero/config.py zero_hpz_partition_size,
// zero_quantized_weights, zero_quantized_gradients) on ZeRO-3's policy (strategies/zero3.h):
// - hpZ keeps a node-local secondary partition of each tensor when it is released, and gathers
//   from it inside the node until the optimizer step invalidates it;
// - qwZ moves int8 codes + fp32 block scales (a batch quantised as one tensor: its codes in one
//   all-gather, its scales in another);
// - qgZ (strategies/qgz.h) reduces each bucket tensor by tensor, a 2-D one as int4 over an
//   all-to-all inside the node and then across nodes.
// Without any of the three knobs make_zero3 builds ZeRO-3 itself.
#include <memory>
#include <stdexcept>
#include <string>

#include "strategies/qgz.h"
#include "strategies/quantize.h"
#include "strategies/zero3.h"

namespace sb {
namespace {

// hpZ and qwZ: where a gather reads from and what it sends.
class ZeroPPParams final : public PartitionedParams {
 public:
  ZeroPPParams(const StrategyContext& ctx, GroupKind shard)
      : PartitionedParams(ctx, shard), secondary_(ctx.model.tensors.size()) {}

  // stage3.py _post_step -> invalidate_secondary_tensor: the updated shards make them stale
  void after_step() override {
    for (TypedBuffer& s : secondary_) s.reset();
    PartitionedParams::after_step();
  }

 protected:
  // hpZ's secondary group is the node (DeepSpeed's groups of zero_hpz_partition_size consecutive
  // ranks, as its tutorial sets it: the GPUs of a node).
  void check() const override {
    const int k = ctx_.options.zero_hpz_partition_size;
    if (k > 1 && k != group_size(GroupKind::kIntra))
      throw std::invalid_argument("--zero-hpz-partition-size " + std::to_string(k) +
                                  ": must be 1 or the ranks per node (" +
                                  std::to_string(group_size(GroupKind::kIntra)) + ")");
  }

  // all_gather_coalesced: a tensor with a secondary partition goes over
  // zero_param_process_group, the node.
  bool from_secondary(int t) const override { return !secondary_[t].empty(); }
  TypedBuffer& source(int t) override { return from_secondary(t) ? secondary_[t] : shards_[t]; }
  GroupKind group(int t) const override {
    return from_secondary(t) ? GroupKind::kIntra : shard_;
  }

  // qwZ (_all_gather_sequential / _all_gather_coalesced with quantize): my n elements at src
  // quantised as one tensor (CUDAQuantizer.quantize's blocks), then the int8 codes and the fp32
  // block scales each all-gathered over `over`; landing waits for the scales and dequantises
  // every rank's block into dst. A gather over one rank is not quantised: all_gather_coalesced
  // takes _no_gather_coalesced (nothing sent) when the partition group is one rank.
  InFlight start_gather(const void* src, void* dst, uint64_t n, DType dt, GroupKind over,
                        const std::string& name) override {
    if (!ctx_.options.zero_quantized_weights || group_size(over) < 2)
      return PartitionedParams::start_gather(src, dst, n, dt, over, name);
    const uint64_t ranks = uint64_t(group_size(over)), me = uint64_t(group_index(over));
    const uint64_t blocks = qwz_blocks(n);
    auto q = std::make_shared<Quantized>();
    q->codes = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, DType::kI8, n * ranks);
    q->scales = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, DType::kF32, blocks * ranks);
    quantize_int8(ctx_.device, src, dt, n, blocks, q->codes.at(me * n),
                  q->scales.at(me * blocks));
    // after these all-gathers every rank holds every rank's codes and scales
    CommHandle codes = maybe_wait(ctx_.comm.all_gather_async(q->codes.at(me * n), q->codes.data(),
                                                             n, DType::kI8, over, name));
    q->scale_gather = maybe_wait(ctx_.comm.all_gather_async(
        q->scales.at(me * blocks), q->scales.data(), blocks, DType::kF32, over, name + ".scales"));
    return {codes, [this, q, dst, dt, n, blocks, ranks] {
              q->scale_gather.wait();
              dequantize_int8(ctx_.device, q->codes.data(), q->scales.data(), n, blocks, ranks,
                              dst, dt);
              *q = Quantized();
            }};
  }

  // _partition_param_sec: my slice of the gathered tensor over the node (padded / G elements at
  // my local rank), kept until the optimizer step.
  void on_release(int t) override {
    if (ctx_.options.zero_hpz_partition_size <= 1 || !secondary_[t].empty()) return;
    const uint64_t G = uint64_t(group_size(GroupKind::kIntra)), len = flats_[t].padded / G;
    const uint64_t mine = uint64_t(group_index(GroupKind::kIntra)) * len;
    secondary_[t] = TypedBuffer(ctx_.memory, MemCategory::kSecondaryParams, full_[t].dtype(), len);
    ctx_.device.copy(secondary_[t].data(), full_[t].at(mine), secondary_[t].bytes());
  }

 private:
  struct Quantized {
    TypedBuffer codes, scales;  // every rank's int8 codes and fp32 block scales, in group order
    CommHandle scale_gather;
  };
  std::vector<TypedBuffer> secondary_;  // hpZ: per tensor, my slice of it over the node
};

class ZeroPP final : public Zero3 {
 public:
  using Zero3::Zero3;

 protected:
  std::unique_ptr<PartitionedParams> make_params() override {
    return std::make_unique<ZeroPPParams>(ctx_, shard());
  }

  // stage3.py __avg_scatter_grads: qgZ only when the world spans more than one node.
  void reduce_bucket() override {
    if (!ctx_.options.zero_quantized_gradients || ctx_.comm.topology().num_nodes() < 2)
      return Zero3::reduce_bucket();
    for (int t : bucket_) reductions_.push_back(qgz_reduction(t));
  }

 private:
  // qgZ: one tensor's all-to-all reduction; as shipped its output is L x the sum
  // (all_to_all_quant_reduce's / num_nodes), which finish() scales by.
  struct QgzReduction final : Reduction {
    std::unique_ptr<QgzReduce> qgz;
    float scale = 1;
    bool done() const override { return qgz->done(); }
    void wait() override { qgz->finish(out, scale); }
  };

  // all_to_all_quant_reduce, one tensor: its qgZ reduction, or (1-D, or numel not a multiple of
  // 2·world) reduce_scatter_coalesced([tensor]): a reduce-scatter of this tensor alone, whose
  // padded flat already holds partition r at r·part.
  std::unique_ptr<Reduction> qgz_reduction(int t) {
    const ParamTensor& info = ctx_.model.tensors[t];
    const FlatLayout& flat = params_->flat(t);
    const DType dt = ctx_.options.grad_dtype();
    const uint64_t part = flat.shard_size(group_size(shard()));
    if (qgz_eligible(info, world())) {
      auto red = std::make_unique<QgzReduction>();
      red->tensors = {t};
      red->out = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, dt, part);
      red->qgz = std::make_unique<QgzReduce>(ctx_.comm, ctx_.device, ctx_.memory, grad_of(t), dt,
                                             flat.padded, qgz_groups_per_partition(info, world()),
                                             ctx_.options.overlap, info.name);
      if (ctx_.options.zero_qgz_variant == QgzVariant::kShipped)
        red->scale = float(group_size(GroupKind::kIntra));
      grad_full_[t].reset();
      return red;
    }
    auto red = std::make_unique<Reduction>();
    red->tensors = {t};
    red->out = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, dt, part);
    if (grad_full_[t].empty()) {  // in the IPG buffer, which the next bucket reuses
      red->staging = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, dt, flat.padded);
      ctx_.device.copy(red->staging.data(), grad_of(t), red->staging.bytes());
    } else {
      red->staging = std::move(grad_full_[t]);
    }
    // after this reduce-scatter each rank holds the summed grads of its partition of t
    red->handle = maybe_wait(ctx_.comm.reduce_scatter_async(
        red->staging.data(), red->out.data(), red->out.size(), dt, shard(), info.name));
    return red;
  }
};

}  // namespace

std::unique_ptr<Strategy> make_zero3(StrategyContext c, StrategyDescription d) {
  const auto& o = c.options;
  if (o.zero_hpz_partition_size > 1 || o.zero_quantized_weights || o.zero_quantized_gradients)
    return std::make_unique<ZeroPP>(std::move(c), std::move(d));
  return std::make_unique<Zero3>(std::move(c), std::move(d));
}

}  // namespace sb
