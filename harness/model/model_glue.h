// What the GPT-2 block (gpt.cc) and the Llama block (llama.cc) do alike around their layers:
// a leaf module run between its hooks, the step's two ends (token ids in, embedding; LM head,
// mean cross-entropy out, and their backward), attention by --attention kind, the residual add
// and a checkpointed block's recompute. Each model file keeps only its own layers (norms, MLP,
// positions); nothing here knows a block's module order beyond the layout's first and last.
#pragma once

#include <cstddef>
#include <vector>

#include "harness/device/device.h"
#include "harness/memory/tracker.h"
#include "harness/model/checkpointing.h"
#include "harness/model/gpt.h"
#include "harness/model/layout.h"

namespace sb {

// A leaf module as its body sees it: its tensors as the hooks hand them out (make_layout's order:
// weight, then bias), asked only when the body uses them, valid only inside run_module's body.
class Module {
 public:
  Module(ModelHooks& hooks, const std::vector<int>& tensors) : hooks_(hooks), tensors_(tensors) {}
  const float* param(int i) { return hooks_.param(tensors_[i]); }
  float* grad(int i) { return hooks_.grad(tensors_[i]); }

 private:
  ModelHooks& hooks_;
  const std::vector<int>& tensors_;
};

// pre hook, body, post hook. Plain calls rather than an RAII guard: post hooks may throw
// (OutOfMemory from a strategy's buffers) and must reach the caller, not std::terminate.
template <class Body>
void run_module(ModelHooks& hooks, const ModelLayout& layout, int m, bool backward, Body&& body) {
  backward ? hooks.pre_backward(m) : hooks.pre_forward(m);
  Module mod(hooks, layout.modules[m].tensors);
  body(mod);
  backward ? hooks.post_backward(m) : hooks.post_forward(m);
}

// The step's two ends, the same for every decoder block: the batch's token ids and targets on
// the device, the embedding (the layout's first module; a second tensor there is a learned
// position table, GPT-2's wpe, which the Llama block's rotary positions do without), the LM
// head (the last module, over the final norm's output) and the mean cross-entropy by
// config.cross_entropy. Owns the tokens, targets, logits and the loss's fp32 buffers
// (kActivations): cross_entropy_floats below, term by term.
class DecoderEnds {
 public:
  DecoderEnds() = default;
  // The layout and device must outlive this (both are the owning model's).
  // bf16: bf16-mixed, the logits are the head matmul's bf16 output (autocast's).
  DecoderEnds(const ModelLayout& layout, Device& device, MemoryTracker& memory, int batch,
              bool bf16 = false);

  // Copies the batch (host arrays of B·T ids) to the device; embeds the tokens into encoded.
  void embed(ModelHooks& hooks, const int* tokens, const int* targets, float* encoded);
  // LM head over the final norm's output; returns the mean cross-entropy over the B·T tokens.
  // Chunked, it also leaves d loss / d logits in the logits' storage, chunk by chunk.
  float head_forward(ModelHooks& hooks, const float* normed);
  // Backward's start, after the forward: d(mean loss)/d logits = (probs - onehot) / BT, then
  // the head's backward, writing d of the final norm's output into dnormed.
  void head_backward(ModelHooks& hooks, const float* normed, float* dnormed);
  // Backward's end: the embedding's gradients from d loss / d encoded.
  void embedding_backward(ModelHooks& hooks, const float* dencoded);

 private:
  bool learned_positions() const { return layout_->modules.front().tensors.size() > 1; }
  int head_module() const { return int(layout_->modules.size()) - 1; }
  bool chunked() const { return layout_->config.cross_entropy == CrossEntropyKind::kChunked; }
  float chunked_forward(Module& head, const float* normed);
  void chunked_backward(Module& head, const float* normed, float* dnormed);
  const ModelLayout* layout_ = nullptr;
  Device* device_ = nullptr;
  int B_ = 0, T_ = 0, C_ = 0, V_ = 0, chunk_rows_ = 0;
  bool bf16_ = false;
  TrackedBuffer<int> tokens_, targets_;  // [B,T]
  // full: logits_ [B·T,V] fp32 (the upcast; then dlogits), probs_ [B·T,V] fp32, and under
  // bf16 half_ [B·T,V] (the head's bf16 output). chunked: the logits (then dlogits) in half_
  // (bf16) or logits_ (fp32) [B·T,V]; probs_ one chunk of rows, and under bf16 logits_ too.
  TrackedBuffer<float> logits_, probs_;
  TrackedBuffer<uint16_t> half_;
  bool have_forward_ = false;
};

// Floats (fp32) and halves (bf16) DecoderEnds holds for the loss of `batch` sequences:
// full V·B·T fp32 logits and probabilities each, plus V·B·T halves under bf16; chunked the
// logits (V·B·T halves under bf16, floats in fp32) and fp32 chunks of R = ceil(B·T / 8) rows:
// one (probabilities) in fp32, two (logits, probabilities) under bf16.
struct LossStorage {
  uint64_t floats = 0, halves = 0;
};
LossStorage cross_entropy_storage(const GptConfig& c, uint64_t batch, bool bf16);
int cross_entropy_chunk_rows(const GptConfig& c, uint64_t batch);

// Floats attention keeps per layer for backward, and the size of backward's scratch: one
// log-sum-exp per query row, B·H·T (fused), or the B·H·T² softmax probabilities (naive).
size_t attention_saved_floats(const GptConfig& c, size_t batch);
// Causal attention over qkv [B,T,3C] into out [B,T,C] by c.attention; att as sized above.
void run_attention_forward(Device& d, const GptConfig& c, float* out, float* att,
                           const float* qkv, int B);
// dqkv (=) from dout; scratch of attention_saved_floats(c, B) floats.
void run_attention_backward(Device& d, const GptConfig& c, float* dqkv, float* scratch,
                            const float* dout, const float* qkv, const float* out,
                            const float* att, int B);
// The residual stream past a branch: out = x + branch (n floats).
void residual_add(Device& d, float* out, const float* x, const float* branch, size_t n);

// Before block l's backward: a checkpointed block kept only its input, so its forward runs
// again, through RecomputeHooks so the strategy sees pre_/post_recompute around each module.
// block_forward(ModelHooks&) runs block l's forward under the hooks it is given.
template <class BlockForward>
void recompute_if_checkpointed(const GptConfig& c, int l, ModelHooks& hooks,
                               BlockForward&& block_forward) {
  if (!is_checkpointed(c, l)) return;
  RecomputeHooks recompute(hooks);
  block_forward(recompute);
}

}  // namespace sb
