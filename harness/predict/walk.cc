// The step driver of the predictor's walk (see header): gpt.cc's module order and hook points,
// compute_views.cc's bf16-mixed workspaces, trainer.cc's peak window.
#include "harness/predict/walk.h"

#include <algorithm>

namespace sb {
namespace {

// Tensors whose fp32 view a module's backward reads: gpt.cc's backward passes only the weight
// (tensor 0) to linear/layernorm/head backward and no parameter to the embedding's.
uint64_t backward_param_elems(const ModelLayout& l, const LeafModule& m) {
  return m.kind == ModuleKind::kEmbedding ? 0 : l.tensors[m.tensors.front()].numel;
}

}  // namespace

std::unique_ptr<StrategyWalk> make_walk(WalkEnv& env) {
  const StrategyDescription& d = env.desc;
  if (d.family == "fsdp") return make_fsdp_walk(env);
  if (d.granularity == Granularity::kTensor) return make_zero3_walk(env);
  return make_bucket_walk(env);
}

void walk_training_step(StrategyWalk& w, WalkEnv& env, uint64_t activation_bytes,
                        uint64_t bf16_operand_bytes) {
  const ModelLayout& l = env.shape.layout;
  MemWalk& mem = env.mem;
  const bool views = env.bf16() && !env.shape.bare;
  mem.alloc(MemCategory::kActivations, activation_bytes);  // GptModel's constructor
  // The device's bf16 operand slots: grown to their largest during the warm-up steps, held
  // through every measured step.
  mem.alloc(MemCategory::kWorkspace, bf16_operand_bytes);
  w.setup();
  mem.reset_peak();
  env.in_step = true;
  w.begin_step();
  const int M = int(l.modules.size());
  for (int m = 0; m < M; ++m) {
    ++env.clock;
    w.pre_forward(m);
    if (views) {  // fp32 copies of every parameter the module reads, dropped after it
      uint64_t elems = 0;
      for (int t : l.modules[m].tensors) elems += l.tensors[t].numel;
      mem.touch(MemCategory::kWorkspace, 4 * elems);
    }
    w.post_forward(m);
  }
  for (int m = M - 1; m >= 0; --m) {
    ++env.clock;
    const LeafModule& mod = l.modules[m];
    w.pre_backward(m);
    for (int t : mod.tensors) w.grad_storage(t);
    if (views) {  // fp32 param view + fp32 grad accumulators; then flush_grads' accumulator
      uint64_t grads = 0, largest = 0;
      for (int t : mod.tensors) {
        grads += l.tensors[t].numel;
        largest = std::max(largest, l.tensors[t].numel);
      }
      const uint64_t held = 4 * (backward_param_elems(l, mod) + grads);
      mem.alloc(MemCategory::kWorkspace, held);
      mem.touch(MemCategory::kWorkspace, 4 * largest);
      mem.free(MemCategory::kWorkspace, held);
    }
    if (m == 0) env.tail = true;  // the last compute of the step is done
    w.post_backward(m);
  }
  ++env.clock;
  env.tail = true;
  w.finish_backward();
  w.optimizer_step();
}

}  // namespace sb
