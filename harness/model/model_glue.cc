// The decoder blocks' shared glue (see header): the step's ends, attention by kind, the
// residual add. Allocates only the ends' buffers; parameters come through the hooks.
#include "harness/model/model_glue.h"

#include <algorithm>

#include "harness/common/check.h"

namespace sb {

int cross_entropy_chunk_rows(const GptConfig& c, uint64_t batch) {
  const uint64_t BT = batch * uint64_t(c.seq_len);
  return int((BT + kCrossEntropyChunks - 1) / kCrossEntropyChunks);
}

LossStorage cross_entropy_storage(const GptConfig& c, uint64_t batch, bool bf16) {
  const uint64_t BTV = batch * uint64_t(c.seq_len) * uint64_t(c.vocab);
  if (c.cross_entropy == CrossEntropyKind::kFull) return {2 * BTV, bf16 ? BTV : 0};
  const uint64_t chunk = uint64_t(cross_entropy_chunk_rows(c, batch)) * uint64_t(c.vocab);
  return bf16 ? LossStorage{2 * chunk, BTV} : LossStorage{BTV + chunk, 0};
}

DecoderEnds::DecoderEnds(const ModelLayout& layout, Device& device, MemoryTracker& memory,
                         int batch, bool bf16)
    : layout_(&layout), device_(&device), B_(batch), T_(layout.config.seq_len),
      C_(layout.config.n_embd), V_(layout.config.vocab),
      chunk_rows_(cross_entropy_chunk_rows(layout.config, uint64_t(batch))), bf16_(bf16) {
  const size_t BT = size_t(B_) * T_, chunk = size_t(chunk_rows_) * V_;
  const auto f = [&](size_t n) { return TrackedBuffer<float>(memory, MemCategory::kActivations, n); };
  tokens_ = TrackedBuffer<int>(memory, MemCategory::kActivations, BT);
  targets_ = TrackedBuffer<int>(memory, MemCategory::kActivations, BT);
  if (bf16) half_ = TrackedBuffer<uint16_t>(memory, MemCategory::kActivations, BT * V_);
  if (!chunked()) {
    logits_ = f(BT * V_);
    probs_ = f(BT * V_);
  } else {
    logits_ = f(bf16 ? chunk : BT * V_);
    probs_ = f(chunk);
  }
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
  float loss = 0.0f;
  run_module(hooks, *layout_, head_module(), false, [&](Module& m) {
    if (chunked()) {
      loss = chunked_forward(m, normed);
      return;
    }
    d.linear_forward(logits_.data(), normed, m.param(0), nullptr, BT, C_, V_);
    if (!bf16_) return;
    // autocast's bf16 logits, and the loss's fp32 upcast of them.
    d.f32_to_bf16(half_.data(), logits_.data(), size_t(BT) * V_);
    d.bf16_to_f32(logits_.data(), half_.data(), size_t(BT) * V_);
  });
  have_forward_ = true;
  if (chunked()) return loss;
  return d.softmax_crossentropy_forward(probs_.data(), logits_.data(), targets_.data(), BT, V_);
}

// Per chunk of rows: its logits in fp32 (the head's matmul over those rows; under bf16 rounded
// through the bf16 storage as autocast's output), the fp32 loss and d loss / d logits, the
// gradient kept in the logits' storage for backward. Returns the mean over all B·T rows.
float DecoderEnds::chunked_forward(Module& head, const float* normed) {
  Device& d = *device_;
  const int BT = B_ * T_;
  double total = 0.0;
  for (int r0 = 0; r0 < BT; r0 += chunk_rows_) {
    const int rows = std::min(chunk_rows_, BT - r0);
    const size_t at = size_t(r0) * V_, n = size_t(rows) * V_;
    float* logits = bf16_ ? logits_.data() : logits_.data() + at;
    d.linear_forward(logits, normed + size_t(r0) * C_, head.param(0), nullptr, rows, C_, V_);
    if (bf16_) {
      d.f32_to_bf16(half_.data() + at, logits, n);
      d.bf16_to_f32(logits, half_.data() + at, n);
    }
    const float mean = d.softmax_crossentropy_forward(probs_.data(), logits,
                                                      targets_.data() + r0, rows, V_);
    total += double(mean) * rows;
    d.crossentropy_backward(logits, probs_.data(), targets_.data() + r0, rows, V_,
                            1.0f / float(BT));
    if (bf16_) d.f32_to_bf16(half_.data() + at, logits, n);
  }
  return float(total / BT);
}

// The head's backward from the dlogits the forward left: in fp32 over all rows at once; under
// bf16 chunk by chunk, each chunk brought back to fp32 (dW accumulates over the chunks).
void DecoderEnds::chunked_backward(Module& head, const float* normed, float* dnormed) {
  Device& d = *device_;
  const int BT = B_ * T_;
  if (!bf16_) {
    d.linear_backward(dnormed, head.grad(0), nullptr, logits_.data(), normed, head.param(0), BT,
                      C_, V_);
    return;
  }
  for (int r0 = 0; r0 < BT; r0 += chunk_rows_) {
    const int rows = std::min(chunk_rows_, BT - r0);
    d.bf16_to_f32(logits_.data(), half_.data() + size_t(r0) * V_, size_t(rows) * V_);
    d.linear_backward(dnormed + size_t(r0) * C_, head.grad(0), nullptr, logits_.data(),
                      normed + size_t(r0) * C_, head.param(0), rows, C_, V_);
  }
}

void DecoderEnds::head_backward(ModelHooks& hooks, const float* normed, float* dnormed) {
  SB_CHECK(have_forward_, "backward without a forward since the last backward");
  have_forward_ = false;  // dlogits overwrite the logits
  Device& d = *device_;
  const int BT = B_ * T_;
  float* dlogits = logits_.data();
  if (!chunked())
    d.crossentropy_backward(dlogits, probs_.data(), targets_.data(), BT, V_, 1.0f / float(BT));
  run_module(hooks, *layout_, head_module(), true, [&](Module& m) {
    if (chunked()) return chunked_backward(m, normed, dnormed);
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
