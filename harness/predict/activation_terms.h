// The closed form of activation bytes that both blocks share (model_shape.cc's activation_bytes
// for the GPT-2 block, llama_shape.cc's llama_activation_bytes for the Llama block): each block
// states its own terms, this sums them the way gpt.cc and llama.cc lay activations out. Written
// apart from the models' code on purpose: the tests check it against the tracker's count.
#pragma once

#include <cstdint>

#include "harness/model/checkpointing.h"
#include "harness/model/config.h"

namespace sb {

// What attention keeps per layer for backward, and the size of its backward scratch: one
// log-sum-exp per query row, B·H·T (--attention fused), or the B·H·T² probabilities (naive).
inline uint64_t attention_floats(const GptConfig& c, uint64_t batch) {
  const uint64_t B = batch, H = c.n_head, T = c.seq_len;
  return c.attention == AttentionKind::kFused ? B * H * T : B * H * T * T;
}

// A block's own activations in floats per token (B·T of them), beside what every block keeps
// alike: residual3 (C per token per layer), attention's saved floats per layer slot and its
// backward scratch once, the logits and probabilities (2·V per token once).
struct ActivationTerms {
  uint64_t per_slot = 0;  // per layer slot, fp32 always: residual2, norm statistics
  uint64_t saved = 0;     // per layer slot, the tensors bf16-mixed saves in bf16
  uint64_t once = 0;      // one layer of scratch and gradients, embedding, final norm
};

// residual3 for every layer; per_slot, saved and attention over S slots (S = L, or under
// activation checkpointing the L − n_ckpt kept layers plus one slot the checkpointed ones
// share); under bf16-mixed saved at 2 bytes plus one layer of it in fp32 as the work; once,
// attention's scratch, logits and probabilities; all fp32 but the bf16 copies, plus int32
// tokens and targets (2·B·T).
inline uint64_t activation_bytes_of(const GptConfig& c, int batch, bool bf16,
                                    const ActivationTerms& t) {
  const uint64_t BT = uint64_t(batch) * c.seq_len, C = c.n_embd, L = c.n_layer, V = c.vocab;
  const uint64_t att = attention_floats(c, uint64_t(batch)), saved = BT * t.saved;
  const uint64_t n_ckpt = uint64_t(checkpointed_blocks(c)), S = L - n_ckpt + (n_ckpt > 0);
  const uint64_t floats = L * BT * C + S * (BT * t.per_slot + att + (bf16 ? 0 : saved)) +
                          (bf16 ? saved : 0) + BT * t.once + att + 2 * BT * V;
  return 4 * floats + (bf16 ? 2 * S * saved : 0) + 2 * 4 * BT;
}

}  // namespace sb
