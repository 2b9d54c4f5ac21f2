// The Llama block's shapes (Touvron et al. 2023, "Llama 2"; Meta's llama3 model card): presets,
// parameter layout and count, FLOPs. GptConfig carries the block (arch = kLlama); the forward
// and backward are llama.h's. Knows nothing of storage or compute.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "harness/model/config.h"
#include "harness/model/layout.h"

namespace sb {

// Null when `name` is no llama preset.
const GptConfig* llama_preset(std::string_view name);
std::vector<std::string> llama_preset_names();
// An "L,C,H,T,V" spec as a Llama block: n_kv_head = H, Llama's SwiGLU width, theta 10000.
GptConfig llama_from_spec(GptConfig c);
// Llama's SwiGLU width for model width C (Meta's llama model.py, FeedForward):
// 256 * ceil(floor(2 * 4C / 3) / 256), e.g. 11008 for C = 4096.
int llama_ffn_rule(int C);
// Throws std::invalid_argument naming --model: KV heads must divide H, even head dim (RoPE).
void validate_llama(const GptConfig& c);
uint64_t count_llama_params(const GptConfig& c);
// Modules per block, in forward order: attention_norm, attn.qkv (wq|wk|wv stacked, [C + 2·KV·hd,
// C]), attn.proj (wo), ffn_norm, mlp.gate_up (w1|w3 stacked, [2F, C]), mlp.down (w2).
constexpr int kLlamaModulesPerBlock = 6;
ModelLayout make_llama_layout(const GptConfig& c);
// Model FLOPs of one training step; see flop_formula's llama text.
double llama_flops_per_step(const GptConfig& c, uint64_t tokens);
const char* llama_flop_formula();

}  // namespace sb
