// The predictor's mirror of one training step: the model's module order and compute views
// (gpt.cc, compute_views.cc) driving a StrategyWalk per strategy family — the strategies'
// hooks with every allocation replaced by a count (MemWalk, counted like MemoryTracker) and
// every collective by a PredictedCall. No buffers, no data, no MPI: only sizes and order.
// Asynchronous completion is modelled: with overlap off a collective is done when issued (as
// the run waits at once); with overlap on, by the next module hook.
#pragma once

#include <memory>

#include "harness/memory/tracker.h"
#include "harness/predict/model_shape.h"
#include "harness/predict/traffic.h"
#include "strategies/strategy.h"

namespace sb {

// MemoryTracker's arithmetic without the memory: current per category, peak, breakdown at it.
struct MemWalk {
  MemBreakdown cur{}, at_peak{};
  uint64_t total = 0, peak = 0;
  void alloc(MemCategory c, uint64_t bytes) {
    cur[int(c)] += bytes;
    total += bytes;
    if (total > peak) {
      peak = total;
      at_peak = cur;
    }
  }
  void free(MemCategory c, uint64_t bytes) {
    cur[int(c)] -= bytes;
    total -= bytes;
  }
  void touch(MemCategory c, uint64_t bytes) {  // a temporary: allocated, used, freed
    alloc(c, bytes);
    free(c, bytes);
  }
  void reset_peak() {  // the trainer's reset at the first measured step
    peak = total;
    at_peak = cur;
  }
};

struct WalkEnv {
  const ModelShape& shape;
  const StrategyDescription& desc;
  const StrategyOptions& opt;
  int world = 1, ranks_per_node = 1;
  MemWalk& mem;
  TrafficAccount& traffic;
  bool in_step = false;  // calls outside the measured step (setup) are not counted
  bool tail = false;     // past the step's last compute: whatever is issued now is exposed
  int clock = 0;         // module hooks so far: the overlap model's notion of "later"

  bool bf16() const { return opt.precision == Precision::kBf16Mixed; }
  DType pdt() const { return opt.param_dtype(); }
  DType gdt() const { return opt.grad_dtype(); }
  uint64_t bp() const { return dtype_bytes(pdt()); }
  uint64_t bg() const { return dtype_bytes(gdt()); }
  uint64_t k_opt() const { return bf16() ? 12 : 8; }  // m, v (+ fp32 master): ZeRO paper §5
  int group_size(GroupKind g) const {
    return g == GroupKind::kWorld   ? world
           : g == GroupKind::kIntra ? ranks_per_node
                                    : world / ranks_per_node;
  }
  // A collective issued at `clock` is complete by then: at once without overlap, else later.
  bool done(int issued_at) const { return !opt.overlap || clock > issued_at; }
  void call(CollKind k, GroupKind g, uint64_t count, DType t, bool exposed = false) {
    if (in_step) traffic.add(PredictedCall{k, g, count, t, exposed || tail});
  }
  // Model state of one shard of `elems` elements: params, grads, optimizer (ShardOptimizer).
  void alloc_state(uint64_t param_elems, uint64_t grad_elems, uint64_t opt_elems) {
    mem.alloc(MemCategory::kParams, bp() * param_elems);
    mem.alloc(MemCategory::kGrads, bg() * grad_elems);
    mem.alloc(MemCategory::kOptimizer, k_opt() * opt_elems);
  }
  // ShardOptimizer::step in bf16-mixed upcasts the grad shard into a workspace first.
  void optimizer_shard(uint64_t elems) {
    if (bf16() && elems > 0) mem.touch(MemCategory::kWorkspace, 4 * elems);
  }
};

class StrategyWalk {
 public:
  explicit StrategyWalk(WalkEnv& env) : env_(env) {}
  virtual ~StrategyWalk() = default;
  virtual void setup() = 0;
  virtual void begin_step() {}
  virtual void pre_forward(int m) {}
  virtual void post_forward(int m) {}
  virtual void pre_backward(int m) {}
  virtual void grad_storage(int t) {}  // the model asks for tensor t's grad in this module
  virtual void post_backward(int m) {}
  virtual void finish_backward() = 0;
  virtual void optimizer_step() = 0;
  virtual uint64_t padded_params() const = 0;

 protected:
  WalkEnv& env_;
};

// The walk for a description (by family and granularity, not by name).
std::unique_ptr<StrategyWalk> make_walk(WalkEnv& env);
std::unique_ptr<StrategyWalk> make_bucket_walk(WalkEnv& env);  // ddp, zero1, zero2
std::unique_ptr<StrategyWalk> make_zero3_walk(WalkEnv& env);
std::unique_ptr<StrategyWalk> make_fsdp_walk(WalkEnv& env);

// Setup, activations, then one step in the model's order (forward 0..M-1, backward M-1..0)
// with the compute views' fp32 workspaces of bf16-mixed. Leaves env.mem at the step's peak.
void walk_training_step(StrategyWalk& w, WalkEnv& env, uint64_t activation_bytes,
                        uint64_t bf16_operand_bytes = 0);

inline uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

}  // namespace sb
