// The decoder blocks' shared glue (see header): the step's ends, attention by kind, the
// residual add. Allocates only the ends' buffers; parameters come through the hooks.
#include "harness/model/model_glue.h"

#include "harness/common/check.h"

namespace sb {

DecoderEnds::DecoderEnds(const ModelLayout& layout, Device& device, MemoryTracker& memory,
                         int batch)
    : layout_(&layout), device_(&device), B_(batch), T_(layout.config.seq_len),
      C_(layout.config.n_embd), V_(layout.config.vocab) {
  const size_t BT = size_t(B_) * T_;
  tokens_ = TrackedBuffer<int>(memory, MemCategory::kActivations, BT);
  targets_ = TrackedBuffer<int>(memory, MemCategory::kActivations, BT);
  logits_ = TrackedBuffer<float>(memory, MemCategory::kActivations, BT * V_);
  probs_ = TrackedBuffer<float>(memory, MemCategory::kActivations, BT * V_);
}

void DecoderEnds::embed(ModelHooks& hooks, const int* tokens, const int* targets,
                        float* encoded) {
  SB_CHECK(tokens != nullptr && targets != nullptr, "forward needs tokens and targets");
  Device& d = *device_;
  d.copy_to_device(tokens_.data(), tokens, tokens_.bytes());
  d.copy_to_device(targets_.data(), targets, targets_.bytes());
  run_module(hooks, *layout_, 0, false, [&](Module& m) {
    const float* wpe = learned_positions() ? m.param(1) : nullptr;
    d.embedding_forward(encoded, tokens_.data(), m.param(0), wpe, B_, T_, C_);
  });
}

float DecoderEnds::head_forward(ModelHooks& hooks, const float* normed) {
  Device& d = *device_;
  const int BT = B_ * T_;
  run_module(hooks, *layout_, head_module(), false, [&](Module& m) {
    d.linear_forward(logits_.data(), normed, m.param(0), nullptr, BT, C_, V_);
  });
  have_forward_ = true;
  return d.softmax_crossentropy_forward(probs_.data(), logits_.data(), targets_.data(), BT, V_);
}

void DecoderEnds::head_backward(ModelHooks& hooks, const float* normed, float* dnormed) {
  SB_CHECK(have_forward_, "backward without a forward since the last backward");
  have_forward_ = false;  // dlogits overwrite the logits
  Device& d = *device_;
  const int BT = B_ * T_;
  float* dlogits = logits_.data();
  d.crossentropy_backward(dlogits, probs_.data(), targets_.data(), BT, V_, 1.0f / float(BT));
  run_module(hooks, *layout_, head_module(), true, [&](Module& m) {
    d.linear_backward(dnormed, m.grad(0), nullptr, dlogits, normed, m.param(0), BT, C_, V_);
  });
}

void DecoderEnds::embedding_backward(ModelHooks& hooks, const float* dencoded) {
  run_module(hooks, *layout_, 0, true, [&](Module& m) {
    float* dwpe = learned_positions() ? m.grad(1) : nullptr;
    device_->embedding_backward(m.grad(0), dwpe, dencoded, tokens_.data(), B_, T_, C_);
  });
}

size_t attention_saved_floats(const GptConfig& c, size_t batch) {
  const size_t B = batch, H = c.n_head, T = c.seq_len;
  return c.attention == AttentionKind::kFused ? B * H * T : B * H * T * T;
}

void run_attention_forward(Device& d, const GptConfig& c, float* out, float* att,
                           const float* qkv, int B) {
  if (c.attention == AttentionKind::kFused)
    d.flash_attention_forward(out, att, qkv, B, c.seq_len, c.n_embd, c.n_head);
  else
    d.attention_forward(out, att, qkv, B, c.seq_len, c.n_embd, c.n_head);
}

void run_attention_backward(Device& d, const GptConfig& c, float* dqkv, float* scratch,
                            const float* dout, const float* qkv, const float* out,
                            const float* att, int B) {
  if (c.attention == AttentionKind::kFused)
    d.flash_attention_backward(dqkv, scratch, dout, qkv, out, att, B, c.seq_len, c.n_embd,
                               c.n_head);
  else
    d.attention_backward(dqkv, scratch, dout, qkv, att, B, c.seq_len, c.n_embd, c.n_head);
}

void residual_add(Device& d, float* out, const float* x, const float* branch, size_t n) {
  d.copy(out, x, n * sizeof(float));
  d.add_inplace(out, branch, n);
}

}  // namespace sb
