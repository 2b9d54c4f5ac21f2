// The workload: a GPT-2-style decoder's forward and backward, written once against the Device
// interface (CPU/OpenBLAS or CUDA/cuBLAS). It owns the activations (counted as such) and asks
// the caller, through ModelHooks, where each parameter and gradient is at the moment a leaf
// module runs — that is where a sharding strategy gathers, frees and reduces.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "harness/device/device.h"
#include "harness/memory/tracker.h"
#include "harness/model/layout.h"

namespace sb {

// Called around every leaf module (index into ModelLayout::modules). param(t)/grad(t) are
// asked only between pre_* and post_* of a module that uses tensor t, and must return fp32
// memory on the model's device holding the full (unsharded) tensor. The model *adds* into
// grad(t) (a tied tensor receives two contributions); the strategy zeroes it.
class ModelHooks {
 public:
  virtual ~ModelHooks() = default;
  virtual void pre_forward(int module) {}
  virtual void post_forward(int module) {}
  virtual void pre_backward(int module) {}
  virtual void post_backward(int module) {}
  // Activation checkpointing: module m's forward run again inside backward to rebuild a
  // checkpointed block's activations. By default the forward hooks fire again, as module
  // hooks do under a recompute (DeepSpeed's CheckpointFunction.backward calls the block's
  // forward); a strategy whose backward gather already covers it overrides these.
  virtual void pre_recompute(int module) { pre_forward(module); }
  virtual void post_recompute(int module) { post_forward(module); }
  virtual const float* param(int tensor) = 0;
  virtual float* grad(int tensor) = 0;
};

class LlamaModel;

// The workload's model: the GPT-2 block (gpt.cc), or the Llama block (llama.cc) when
// config.arch is llama, behind one interface.
class GptModel {
 public:
  // Allocates activations for `batch` sequences of config.seq_len tokens (kActivations).
  // bf16_activations (bf16-mixed): the tensors autocast produces in bf16 are saved in bf16.
  GptModel(const GptConfig& config, int batch, Device& device, MemoryTracker& memory,
           bool bf16_activations = false);
  ~GptModel();
  const ModelLayout& layout() const { return layout_; }
  int batch() const { return batch_; }

  // tokens/targets: host arrays of batch*T ids. Returns the mean cross-entropy over them.
  // With config.checkpoint_every, a checkpointed block keeps only its input: its activations
  // live in one shared slot, rebuilt by running block_forward again in backward.
  float forward(const int* tokens, const int* targets, ModelHooks& hooks);
  // Backward of the last forward; d(mean loss)/d(param) is added into hooks.grad(t).
  void backward(ModelHooks& hooks);

 private:
  struct Acts;
  void block_forward(int l, ModelHooks& hooks, bool cached = false);
  GptConfig config_;
  ModelLayout layout_;
  int batch_;
  Device& device_;
  MemoryTracker& memory_;
  std::unique_ptr<Acts> acts_;
  std::unique_ptr<LlamaModel> llama_;  // set for the Llama block; then acts_ is empty
};

// Model FLOPs of one training step (forward + backward) for `tokens` tokens:
// 6 * N_matmul * tokens + 12 * L * C * T * tokens (attention scores and values, forward and
// backward; PaLM appendix B / Chinchilla), N_matmul = all matmul weights incl. the LM head.
// The Llama block (llama_layout.h's llama_flops_per_step): the same form with
// N_matmul = L·(2C² + 2·C·KV·hd + 3·C·F) + V·C — wq, wo C² each; wk, wv C·KV·hd each (grouped-
// query attention: KV K/V heads of hd = C/H); SwiGLU w1, w3, w2 C·F each; the untied head —
// and the same attention term (every one of the H query heads attends over T).
double flops_per_step(const GptConfig& c, uint64_t tokens);
const char* flop_formula();                      // the GPT-2 block's
const char* flop_formula(const GptConfig& c);    // the formula of c's block

}  // namespace sb
