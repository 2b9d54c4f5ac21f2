// The Llama block's forward and backward (Touvron et al. 2023; Meta's llama/model.py):
// RMSNorm, attention with rotary positions over grouped-query K/V heads, SwiGLU MLP, no biases,
// an untied LM head. Written against the Device interface and bracketed by the same ModelHooks
// as gpt.cc, so every strategy, the predictor's dry run and both devices run it unchanged.
// GptModel delegates to it when config.arch is llama; the layout is llama_layout.h's.
#pragma once

#include <memory>

#include "harness/device/device.h"
#include "harness/memory/tracker.h"
#include "harness/model/layout.h"
#include "harness/model/llama_layout.h"

namespace sb {

class ModelHooks;

class LlamaModel {
 public:
  // Activations (kActivations) for `batch` sequences; bf16_activations as GptModel's.
  LlamaModel(const GptConfig& config, int batch, Device& device, MemoryTracker& memory,
             bool bf16_activations);
  ~LlamaModel();
  float forward(const int* tokens, const int* targets, ModelHooks& hooks);
  void backward(ModelHooks& hooks);

 private:
  struct Acts;
  // A block's sizes as the kernels take them: B batch, T tokens, C width, H query heads, KV
  // K/V heads of hd = C/H, F SwiGLU width.
  struct BlockDims {
    int B, T, C, H, KV, hd, F, BT;
  };
  void forward_block(int l, ModelHooks& hooks, bool cached = false);
  void backward_block(int l, ModelHooks& hooks);
  GptConfig config_;
  ModelLayout layout_;
  int batch_;
  BlockDims dims_{};
  Device& device_;
  std::unique_ptr<Acts> acts_;
};

}  // namespace sb
