// A sharding strategy is a policy: it decides when parameters are gathered and freed, when
// gradients are reduced and over which group, and what each rank keeps. The driver owns the
// loop; the strategy sees the model through ModelHooks and the world through the
// Communicator front end. It never includes MPI or CUDA headers.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/device/device.h"
#include "harness/memory/tracker.h"
#include "harness/model/gpt.h"
#include "harness/model/layout.h"
#include "harness/model/compute_views.h"
#include "harness/optim/shard_optimizer.h"
#include "strategies/options.h"

namespace sb {

enum class Granularity { kBucket, kTensor, kUnit };

// What a strategy is, in one place: the run, the tests and the predictor all read this.
struct StrategyDescription {
  std::string name;
  std::string family;           // "ddp", "zero", "fsdp", "fsdp2", "mics"
  bool shards_params = false;   // at rest
  bool shards_grads = false;
  bool shards_optimizer = false;
  GroupKind shard_group = GroupKind::kWorld;  // the group shards are spread over
  bool replicate_across_nodes = false;        // hybrid: all-reduce of shards across nodes
  bool reshard_after_forward = true;          // FSDP FULL_SHARD vs SHARD_GRAD_OP
  bool gather_after_step = false;             // ZeRO-1/2: params refreshed after the step
  Granularity granularity = Granularity::kBucket;
};

// Parameters, gradients and optimizer state all sharded over `group` (ZeRO-3, MiCS, FSDP,
// FSDP2); `replicated`: the shards are also all-reduced across the groups' replicas.
StrategyDescription fully_sharded(const char* name, const char* family, GroupKind group,
                                  Granularity granularity, bool replicated = false);

struct StrategyContext {
  const ModelLayout& model;
  Communicator& comm;
  Device& device;
  MemoryTracker& memory;
  StrategyOptions options;
};

// Call it on the handle just issued: with --overlap off, wait now (the whole collective is
// exposed); otherwise the handle is kept and waited on late.
inline CommHandle wait_unless_overlap(CommHandle h, const StrategyContext& ctx) {
  if (!ctx.options.overlap) h.wait_from_issue();
  return h;
}

class Strategy : public ModelHooks {
 public:
  explicit Strategy(StrategyContext ctx)
      : ctx_(std::move(ctx)), views_(ctx_.model, ctx_.device, ctx_.memory) {}
  ~Strategy() override = default;

  virtual const StrategyDescription& description() const = 0;
  // Shard what is sharded, allocate what is kept, initialise parameters (deterministically).
  virtual void setup() = 0;
  virtual void begin_step() {}
  // Gradient accumulation (options.grad_accum = K > 1): called before each micro-batch's
  // forward; `sync` on the last one, where the accumulated gradients must be reduced.
  virtual void begin_micro_step(bool sync) {}
  // After the model's backward: make every gradient reduction complete.
  virtual void finish_backward() = 0;
  // AdamW on what this rank owns, then restore the strategy's at-rest invariant.
  virtual void optimizer_step(int step) = 0;
  // Full fp32 parameters in ModelLayout tensor order (for checksums and parity tests).
  virtual std::vector<float> gather_full_params() = 0;
  // Parameters after the strategy's padding (what is really stored across the shard group).
  virtual uint64_t padded_params() const = 0;

  // ModelHooks: conversions (bf16 <-> fp32 views) are handled here once for every strategy.
  void pre_forward(int m) final { on_pre_forward(m); }
  void post_forward(int m) final {
    views_.release_params();
    on_post_forward(m);
  }
  void pre_recompute(int m) final { on_pre_recompute(m); }
  void post_recompute(int m) final {
    views_.release_params();
    on_post_recompute(m);
  }
  void pre_backward(int m) final { on_pre_backward(m); }
  void post_backward(int m) final {
    views_.flush_grads();
    views_.release_params();
    on_post_backward(m);
  }
  const float* param(int t) final {
    auto [p, d] = param_storage(t);
    return views_.param(t, p, d);
  }
  float* grad(int t) final {
    auto [g, d] = grad_storage(t);
    return views_.grad(t, g, d);
  }

 protected:
  virtual void on_pre_forward(int m) {}
  virtual void on_post_forward(int m) {}
  // Activation checkpointing's recompute of module m inside backward: the forward hooks fire
  // again unless a strategy says otherwise (see ModelHooks::pre_recompute).
  virtual void on_pre_recompute(int m) { on_pre_forward(m); }
  virtual void on_post_recompute(int m) { on_post_forward(m); }
  virtual void on_pre_backward(int m) {}
  virtual void on_post_backward(int m) {}
  // Where the full tensor t is right now (must be materialised), in the stored dtype.
  virtual std::pair<const void*, DType> param_storage(int t) = 0;
  virtual std::pair<void*, DType> grad_storage(int t) = 0;

  CommHandle maybe_wait(CommHandle h) { return wait_unless_overlap(std::move(h), ctx_); }
  int world() const { return ctx_.comm.topology().world_size(); }
  // Summed gradients (over ranks and micro-batches) to their mean: the optimizer's grad scale.
  float mean_grad_scale() const { return 1.0f / float(world() * ctx_.options.grad_accum); }
  int group_size(GroupKind g) const { return ctx_.comm.group(g).size(); }
  int group_index(GroupKind g) const { return ctx_.comm.group(g).index; }

  StrategyContext ctx_;
  ComputeViews views_;
};

using StrategyFactory = std::function<std::unique_ptr<Strategy>(StrategyContext)>;
struct StrategyEntry {
  StrategyDescription description;
  StrategyFactory make;
};
// The registry: every strategy by name, in the order the matrix runs them.
const std::vector<StrategyEntry>& strategy_registry();
const StrategyEntry* find_strategy(const std::string& name);
std::vector<std::string> strategy_names();

// Registration hooks of each strategy file (called by the registry; keeps files independent).
void register_ddp(std::vector<StrategyEntry>& out);
void register_zero(std::vector<StrategyEntry>& out);
void register_zero3(std::vector<StrategyEntry>& out);
void register_fsdp(std::vector<StrategyEntry>& out);
void register_fsdp2(std::vector<StrategyEntry>& out);
void register_mics(std::vector<StrategyEntry>& out);

// Tensors in the order their gradients become complete during backward (bucket order).
std::vector<int> tensors_in_grad_ready_order(const ModelLayout& model);

// Copies the tensors of a full flat buffer (device memory, stored dtype) into `out`, which
// holds every tensor of the model back to back in ModelLayout order (fp32).
void flat_to_full(const ModelLayout& model, const FlatLayout& flat, const void* data, DType dtype,
                  Device& device, std::vector<float>& out);
// Element offset of each tensor in that back-to-back order.
std::vector<uint64_t> full_offsets(const ModelLayout& model);

}  // namespace sb
