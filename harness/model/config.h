// Model configurations: named presets and the "L,C,H,T,V" spec, with validation messages that
// name the flag and what is allowed. Knows nothing of parameters' storage or compute.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sb {

// How attention keeps what its backward needs. kNaive materialises the B·NH·T² softmax
// probabilities (and a scratch of the same size in backward); kFused is FlashAttention's tiled
// algorithm (Dao et al. 2022, Alg. 1-2): an online softmax keeps only each query row's
// log-sum-exp, and backward recomputes the probabilities tile by tile. Real stacks run fused
// (PyTorch SDPA, flash-attn), so it is the default.
enum class AttentionKind { kNaive, kFused };
const char* attention_name(AttentionKind a);
// "naive" | "fused"; throws std::invalid_argument naming --attention.
AttentionKind parse_attention(std::string_view s);

// How the LM head's logits become the loss (--cross-entropy). kFull: the logits [B·T, V] as the
// matmul gives them (bf16 under bf16-mixed, autocast's output), their fp32 upcast and the fp32
// softmax probabilities, all held for backward, as an unfused `cross_entropy(logits.float(),
// targets)` holds them at its peak. kChunked: the loss and d loss / d logits computed in fp32
// one chunk of rows at a time (a fused/chunked cross-entropy; torchtune's
// CEWithChunkedOutputLoss splits into 8 chunks), the gradient written over the logits' own
// storage (bf16 under bf16-mixed), so only one chunk is ever fp32.
enum class CrossEntropyKind { kFull, kChunked };
const char* cross_entropy_name(CrossEntropyKind k);
// "full" | "chunked"; throws std::invalid_argument naming --cross-entropy.
CrossEntropyKind parse_cross_entropy(std::string_view s);
constexpr int kCrossEntropyChunks = 8;

// The decoder block: GPT-2's (LayerNorm, GELU MLP, learned positions, biases) or Llama's
// (RMSNorm, SwiGLU MLP, rotary positions, grouped-query attention, no biases, untied head;
// Touvron et al. 2023). llama.h holds the Llama block's layout, forward and backward.
enum class ArchKind { kGpt2, kLlama };
const char* arch_name(ArchKind a);
// "gpt2" | "llama"; throws std::invalid_argument naming --arch.
ArchKind parse_arch(std::string_view s);

struct GptConfig {
  std::string name;     // preset name, or the spec string
  int n_layer = 2;      // L
  int n_embd = 32;      // C
  int n_head = 4;       // H
  int seq_len = 16;     // T: tokens per training sample (+1 target); the context by default
  int vocab = 64;       // V
  int context = 0;      // positions the model has (wpe rows); 0 = seq_len. run --seq S sets
                        // seq_len = S <= context = the preset's T.
  bool tied_head = true;  // LM head shares the token embedding (GPT-2)
  AttentionKind attention = AttentionKind::kFused;  // --attention
  CrossEntropyKind cross_entropy = CrossEntropyKind::kFull;  // --cross-entropy
  int checkpoint_every = 0;  // --activation-checkpointing: 0 none, K every K-th block (1 block),
                             // -1 op (checkpointing.h's kCheckpointOp)
  ArchKind arch = ArchKind::kGpt2;                  // --arch (a llama preset implies llama)
  int n_kv_head = 0;        // llama: K/V heads (GQA when < n_head); 0 = n_head
  int ffn_hidden = 0;       // llama: SwiGLU hidden width (11008 for 7B); 0 = Llama's rule
  float rope_theta = 10000.0f;  // llama: RoPE base (10000 Llama 2, 500000 Llama 3)
  int positions() const { return context > 0 ? context : seq_len; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int head_dim() const { return n_embd / n_head; }
};

std::vector<std::string> preset_names();
// Preset name or "L,C,H,T,V". Throws std::invalid_argument naming --model and what is allowed.
// arch ("" = the preset's, gpt2 for a spec): --arch; a spec under llama gets n_kv_head = H and
// Llama's SwiGLU width; a preset of the other block is an error naming --arch.
GptConfig parse_model(std::string_view spec, std::string_view arch = "");
// Throws std::invalid_argument when dims are inconsistent (C % H, non-positive values).
void validate(const GptConfig& c);
// Unpadded parameter count of the workload (formula, matches make_layout's sum).
uint64_t count_params(const GptConfig& c);

}  // namespace sb
