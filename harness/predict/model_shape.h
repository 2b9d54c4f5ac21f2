// The workload as the predictor needs it: the run's own ModelLayout (tensors, leaf modules)
// plus the stated formulas for activation bytes and FLOPs, cached per model so a sweep builds
// each layout once. A bare parameter count (--params, as the ZeRO
// paper's tables use) becomes one tensor in one module: model state and bytes, no activations.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/model/config.h"
#include "harness/model/layout.h"

namespace sb {

struct ModelShape {
  GptConfig config;
  bool bare = false;       // --params: no architecture behind the count
  ModelLayout layout;      // exactly what make_layout gives the run
  uint64_t num_params = 0; // unpadded Ψ
};

// Cached (thread-safe): the same config returns the same shape.
std::shared_ptr<const ModelShape> model_shape(const GptConfig& c);
// seq_len: tokens per sample for the FLOPs of a bare count (GPT-3's context by default).
std::shared_ptr<const ModelShape> bare_shape(uint64_t params, int seq_len = 2048);

// Predict-only model aliases at GPT-3 sizes (Brown et al. 2020, Table 2.1), vocab 50304:
// gpt3-1.3b, gpt3-2.7b, gpt3-6.7b, gpt3-13b, gpt3-175b; then every run preset or L,C,H,T,V.
GptConfig parse_predict_model(const std::string& spec, const std::string& arch = "");
std::vector<std::string> predict_model_aliases();

// Bytes of GptModel's kActivations for `batch` sequences (fp32 activations, int32 tokens),
// term by term as gpt.cc allocates them (B batch, T seq, C width, NH heads, V vocab, L layers):
//   per layer: 18·BTC (ln1 1, qkv 3, atty 1, attproj 1, residual2 1, ln2 1, fch 4, fch_gelu 4,
//              fcproj 1, residual3 1) + 4·BT (ln1/ln2 mean, rstd) + B·NH·T² (att probabilities)
//   once:      15·BTC (encoded, lnf, dresidual, dbtc, dqkv 3, dfch_gelu 4, dfch 4) + 2·BT (lnf
//              mean, rstd) + 2·BTV (logits, probs) + B·NH·T² (datt)
//   all ×4 bytes, plus 2·BT int32 (tokens, targets).
// bf16: bf16-mixed's storage (gpt.cc's Saved): see activation_formula().
uint64_t activation_bytes(const GptConfig& c, int batch, bool bf16 = false);
const char* activation_formula();
// What a bf16-mixed PyTorch / DeepSpeed stack holds for the same activations (activation_terms.h's
// held_activation_bytes_of): stream_bf16 where the model computes with bf16 parameters (every
// strategy but DDP's autocast). Equal to activation_bytes under fp32.
uint64_t held_activation_bytes(const GptConfig& c, int batch, bool bf16, bool stream_bf16);
// The loss's bytes by --cross-entropy and precision (activation_terms.h's loss_bytes).
const char* cross_entropy_formula();
// Bytes of the CUDA device's two bf16 operand slots once a bf16-matmul step has run: each slot
// holds the largest op(A) / op(B) operand of any matmul of the step (cuda_device.cu).
uint64_t bf16_operand_bytes(const GptConfig& c, int batch);
const char* bf16_operand_formula();

// The Llama block's (llama.cc's LlamaModel::Acts, term by term; llama_shape.cc):
//   per layer: B·T·(8C + 3F) (attention_norm and ffn_norm outputs, qkv after RoPE 3C, attention
//              output, residual2, residual3, w1|w3 output 2F, SwiGLU output F) + 2·BT (the norms'
//              rstd) + A (probabilities or lse)
//   once:      B·T·(8C + 2·KV·hd + 3F) (embedding output, the qkv projection / its gradient,
//              work, final norm, dresidual, dqkv 3C, dh 2F, dg F) + BT + 2·BTV + A
// bf16-mixed: the per-layer B·T·(6C + 3F) at 2 bytes plus one layer of them in fp32.
// Activation checkpointing: every per-layer term but residual3 (B·T·C) over S = L − n_ckpt + 1.
struct ActivationTerms;
ActivationTerms llama_activation_terms(const GptConfig& c);
uint64_t llama_activation_bytes(const GptConfig& c, int batch, bool bf16);
const char* llama_activation_formula();
uint64_t llama_bf16_operand_bytes(const GptConfig& c, int batch);
const char* llama_bf16_operand_formula();

// Model FLOPs of one step for `tokens` tokens: gpt.h's flops_per_step, or 6·Ψ·tokens for a
// bare count (Kaplan et al. 2020's C ≈ 6N per token).
double predict_flops(const ModelShape& m, uint64_t tokens);

}  // namespace sb
