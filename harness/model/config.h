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
  int checkpoint_every = 0;  // --activation-checkpointing: 0 none, K every K-th block (1 block)
  int positions() const { return context > 0 ? context : seq_len; }
};

std::vector<std::string> preset_names();
// Preset name or "L,C,H,T,V". Throws std::invalid_argument naming --model and what is allowed.
GptConfig parse_model(std::string_view spec);
// Throws std::invalid_argument when dims are inconsistent (C % H, non-positive values).
void validate(const GptConfig& c);
// Unpadded parameter count of the workload (formula, matches make_layout's sum).
uint64_t count_params(const GptConfig& c);

}  // namespace sb
