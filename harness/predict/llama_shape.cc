// The Llama block's closed forms for the predictor (model_shape.h): activation bytes as
// llama.cc allocates them, and the CUDA device's bf16 operand slots for its matmuls.
#include <algorithm>

#include "harness/predict/activation_terms.h"
#include "harness/predict/model_shape.h"

namespace sb {

ActivationTerms llama_activation_terms(const GptConfig& c) {
  const uint64_t C = c.n_embd, F = c.ffn_hidden, KVD = uint64_t(c.kv_heads()) * c.head_dim();
  // Per token: per layer residual2 and the norms' rstd; saved, the six tensors bf16-mixed keeps
  // in bf16 (model_shape.h); once embedding output, qkv_raw, work, final norm and its rstd,
  // dresidual, dqkv 3C, dh 2F, dg F.
  // op checkpointing keeps qkv 3C (after RoPE), atty C and w1|w3's 2F per layer.
  // Held: residual2, and the embedding output, work, dresidual in the stream's dtype;
  // qkv_raw, the final norm (the head's bf16 input copy), dqkv, dh, dg in bf16.
  return {.per_slot = C + 2, .saved = 6 * C + 3 * F, .op_saved = 4 * C + 2 * F,
          .once = 8 * C + 2 * KVD + 3 * F + 1, .per_slot_stream = C, .once_stream = 3 * C,
          .once_bf16 = 5 * C + 2 * KVD + 3 * F};
}

uint64_t llama_activation_bytes(const GptConfig& c, int batch, bool bf16) {
  return activation_bytes_of(c, batch, bf16, llama_activation_terms(c));
}

const char* llama_activation_formula() {
  return "4*(L*(B*T*(8*C + 3*F) + 2*B*T + A) + B*T*(8*C + 2*KV*hd + 3*F) + B*T + 2*B*T*V + A) "
         "+ 8*B*T bytes (fp32); bf16-mixed: B*T*(6*C + 3*F) of each layer's (the norms' "
         "outputs, qkv after RoPE, attention output, w1|w3 output, SwiGLU output) at 2 bytes "
         "plus one layer of them in fp32 as work; A = B*H*T (--attention fused) or B*H*T^2 "
         "(naive). llama.cc's activations kept for backward, one layer of fp32 scratch and "
         "activation gradients, int32 tokens/targets. --activation-checkpointing: in every "
         "per-layer term but one B*T*C (residual3, the next block's input) L becomes "
         "S = L - n_ckpt + 1 (the kept layers and one recompute slot; S = L without). The loss's "
         "2*B*T*V floats are --cross-entropy full in fp32: see formulas.cross_entropy. "
         "--activation-checkpointing op: S = 1, but the tensors op keeps (GPT-2 qkv, atty, fc: "
         "8*B*T*C; Llama qkv, atty, w1|w3: B*T*(4*C + 2*F)) and A over L";
}

uint64_t llama_bf16_operand_bytes(const GptConfig& c, int batch) {
  const uint64_t B = uint64_t(batch), T = c.seq_len, C = c.n_embd, H = c.n_head, V = c.vocab,
                 F = c.ffn_hidden, BT = B * T, KVD = uint64_t(c.kv_heads()) * c.head_dim();
  // Slot A (op(A)): a linear's input or output gradient, or one sequence's probabilities.
  const uint64_t probs = c.attention == AttentionKind::kNaive ? H * T * T : 0;
  const uint64_t a = std::max({head_rows(c, B) * V, BT * 2 * F, BT * (C + 2 * KVD), BT * C, probs});
  // Slot B (op(B)): a weight, or a linear's input in its dW.
  const uint64_t b = std::max({V * C, 2 * F * C, (C + 2 * KVD) * C, BT * F, BT * C});
  return 2 * (a + b);
}

const char* llama_bf16_operand_formula() {
  return "2*(max(R*V, 2*B*T*F, B*T*(C + 2*KV*hd), H*T^2 if --attention naive) + "
         "max(V*C, 2*F*C, (C + 2*KV*hd)*C, B*T*F)) bytes: the CUDA device's bf16 copies of the "
         "largest op(A) and op(B) matmul operands (the Llama block); R = B*T, or ceil(B*T/8) under "
         "--cross-entropy chunked";
}

}  // namespace sb
