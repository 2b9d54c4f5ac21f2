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

// Rows of one matmul of the LM head: all B·T, or one chunk of ceil(B·T / 8) under
// --cross-entropy chunked.
inline uint64_t head_rows(const GptConfig& c, uint64_t batch) {
  const uint64_t BT = batch * uint64_t(c.seq_len);
  return c.cross_entropy == CrossEntropyKind::kChunked
             ? (BT + kCrossEntropyChunks - 1) / kCrossEntropyChunks
             : BT;
}

// Bytes the loss holds (V per token row): full, fp32 logits (the upcast, later dlogits) and
// probabilities, 8·B·T·V, plus bf16-mixed's bf16 logits, 2·B·T·V; chunked, the logits (then
// dlogits) 4·B·T·V in fp32 or 2·B·T·V in bf16, plus fp32 chunks of R = head_rows rows: the
// probabilities (fp32), or the logits and probabilities (bf16).
inline uint64_t loss_bytes(const GptConfig& c, uint64_t batch, bool bf16) {
  const uint64_t BTV = batch * uint64_t(c.seq_len) * uint64_t(c.vocab);
  const uint64_t RV = head_rows(c, batch) * uint64_t(c.vocab);
  if (c.cross_entropy == CrossEntropyKind::kFull) return 8 * BTV + (bf16 ? 2 * BTV : 0);
  return bf16 ? 2 * BTV + 8 * RV : 4 * BTV + 4 * RV;
}

// A block's own activations in floats per token (B·T of them), beside what every block keeps
// alike: residual3 (C per token per layer), attention's saved floats per layer slot and its
// backward scratch once, the logits and probabilities (2·V per token once).
struct ActivationTerms {
  uint64_t per_slot = 0;  // per layer slot, fp32 always: residual2, norm statistics
  uint64_t saved = 0;     // per layer slot, the tensors bf16-mixed saves in bf16
  uint64_t op_saved = 0;  // of saved, what op checkpointing keeps per layer (matmul outputs
                          // it saves, attention's output; attention's saved floats too)
  uint64_t once = 0;      // one layer of scratch and gradients, embedding, final norm
  // Of per_slot and once, what a bf16-mixed stack holds in the residual stream's dtype (the
  // stream, its gradient) and, of once, what it holds in bf16 (autocast's outputs and their
  // gradients); the rest (statistics) stays fp32 (tracker.h's Held).
  uint64_t per_slot_stream = 0, once_stream = 0, once_bf16 = 0;
  // Of saved (not op_saved), what backward never reads (GPT-2's projection outputs): the stack
  // holds one layer of it in bf16 while the layer runs.
  uint64_t transient = 0;
};

// residual3 for every layer; per_slot, saved and attention over S slots (S = L, or under
// activation checkpointing the L − n_ckpt kept layers plus one slot the checkpointed ones
// share; under op S = 1 but op_saved and attention over L); under bf16-mixed saved at 2 bytes plus one layer of it in fp32 as the work; once,
// attention's scratch; all fp32 but the bf16 copies; the loss (loss_bytes); int32 tokens and
// targets (2·B·T).
inline uint64_t activation_bytes_of(const GptConfig& c, int batch, bool bf16,
                                    const ActivationTerms& t) {
  const uint64_t BT = uint64_t(batch) * c.seq_len, C = c.n_embd, L = c.n_layer;
  const uint64_t att = attention_floats(c, uint64_t(batch)), saved = BT * t.saved;
  const uint64_t n_ckpt = uint64_t(checkpointed_blocks(c)), S = L - n_ckpt + (n_ckpt > 0);
  const uint64_t S_op = is_op_checkpointing(c) ? L : S;  // slots of op_saved and attention
  // the saved tensors' bytes per token at 1 byte each, over their slots
  const uint64_t saved_slots = BT * (S * (t.saved - t.op_saved) + S_op * t.op_saved);
  const uint64_t floats = L * BT * C + S * BT * t.per_slot + S_op * att +
                          (bf16 ? saved : saved_slots) + BT * t.once + att;
  return 4 * floats + (bf16 ? 2 * saved_slots : 0) + loss_bytes(c, uint64_t(batch), bf16) +
         2 * 4 * BT;
}

// What a bf16-mixed PyTorch / DeepSpeed stack holds for the same activations (tracker.h's Held,
// as gpt.cc and llama.cc annotate them): the residual stream (residual3 for every layer, the
// per-slot stream terms, the stream's once terms) at 2 bytes where the model computes with bf16
// parameters (stream_bf16) and 4 under DDP's autocast; the saved tensors at 2 bytes with no
// fp32 work, those backward never reads for one layer only; autocast's once terms at 2 bytes; statistics and fused attention's floats at 4,
// naive attention's probabilities in the stream's dtype; the loss as --cross-entropy says.
// Under fp32 this is activation_bytes_of.
inline uint64_t held_activation_bytes_of(const GptConfig& c, int batch, bool bf16,
                                         bool stream_bf16, const ActivationTerms& t) {
  if (!bf16) return activation_bytes_of(c, batch, false, t);
  const uint64_t BT = uint64_t(batch) * c.seq_len, C = c.n_embd, L = c.n_layer;
  const uint64_t att = attention_floats(c, uint64_t(batch));
  const uint64_t n_ckpt = uint64_t(checkpointed_blocks(c)), S = L - n_ckpt + (n_ckpt > 0);
  const uint64_t S_op = is_op_checkpointing(c) ? L : S;
  const uint64_t saved_slots =
      BT * (S * (t.saved - t.op_saved - t.transient) + S_op * t.op_saved + t.transient);
  const uint64_t s = stream_bf16 ? 2 : 4;
  const uint64_t a = c.attention == AttentionKind::kFused ? 4 : s;
  return s * (L * BT * C + S * BT * t.per_slot_stream + BT * t.once_stream) +
         4 * (S * BT * (t.per_slot - t.per_slot_stream) +
              BT * (t.once - t.once_stream - t.once_bf16)) +
         2 * (BT * t.once_bf16 + saved_slots) + a * (S_op * att + att) +
         loss_bytes(c, uint64_t(batch), bf16) + 2 * 4 * BT;
}

}  // namespace sb
