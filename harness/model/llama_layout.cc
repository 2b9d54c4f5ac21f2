// Llama presets and parameter layout. Shapes: Llama 2 (Touvron et al. 2023, Table 1 and
// Meta's llama/model.py: dim, n_layers, n_heads, n_kv_heads, ffn hidden from multiple_of and
// ffn_dim_multiplier), Llama 3 8B (Meta's llama3 params.json: n_kv_heads 8, vocab 128256,
// ffn 14336, rope_theta 500000). Init as GPT-2's (layout.cc) for the matrices, ones for norms.
#include "harness/model/llama_layout.h"

#include <stdexcept>

#include "harness/model/layout_builder.h"

namespace sb {
namespace {

struct LlamaPreset {
  const char* name;
  int L, C, H, KV, F, T, V;
  float theta;
};
// llama-tiny: the tests' shape (GQA 4 query heads on 2 K/V heads). llama-tiny-pad: every
// tensor, every segment and the total are not multiples of 3 (padding everywhere at a world of
// 3; every Llama size is even, C = H·hd with an even head dim).
constexpr LlamaPreset kLlamaPresets[] = {
    {"llama-tiny", 2, 32, 4, 2, 88, 16, 64, 10000.0f},
    {"llama-tiny-pad", 2, 20, 2, 1, 38, 16, 61, 10000.0f},
    {"llama2-7b", 32, 4096, 32, 32, 11008, 4096, 32000, 10000.0f},
    {"llama2-13b", 40, 5120, 40, 40, 13824, 4096, 32000, 10000.0f},
    // Llama 2 34B (Table 1: GQA, not released): Code Llama 34B's released shape, the same
    // architecture (params.json: dim 8192, 48 layers, 64 heads, 8 K/V heads, ffn 22016).
    {"llama2-34b", 48, 8192, 64, 8, 22016, 4096, 32000, 10000.0f},
    {"llama2-70b", 80, 8192, 64, 8, 28672, 4096, 32000, 10000.0f},
    {"llama3-8b", 32, 4096, 32, 8, 14336, 8192, 128256, 500000.0f},
};

GptConfig to_config(const LlamaPreset& p) {
  GptConfig c{p.name, p.L, p.C, p.H, p.T, p.V, 0, false};
  c.arch = ArchKind::kLlama;
  c.n_kv_head = p.KV;
  c.ffn_hidden = p.F;
  c.rope_theta = p.theta;
  return c;
}

const std::vector<GptConfig>& presets() {
  static const std::vector<GptConfig> v = [] {
    std::vector<GptConfig> out;
    for (const LlamaPreset& p : kLlamaPresets) out.push_back(to_config(p));
    return out;
  }();
  return v;
}

}  // namespace

const GptConfig* llama_preset(std::string_view name) {
  for (const GptConfig& c : presets())
    if (c.name == name) return &c;
  return nullptr;
}

std::vector<std::string> llama_preset_names() {
  std::vector<std::string> v;
  for (const LlamaPreset& p : kLlamaPresets) v.emplace_back(p.name);
  return v;
}

int llama_ffn_rule(int C) {
  const int64_t hidden = 2 * 4 * int64_t(C) / 3;
  return int(256 * ((hidden + 255) / 256));
}

GptConfig llama_from_spec(GptConfig c) {
  c.arch = ArchKind::kLlama;
  c.tied_head = false;
  c.n_kv_head = c.n_head;
  c.ffn_hidden = llama_ffn_rule(c.n_embd);
  return c;
}

void validate_llama(const GptConfig& c) {
  auto bad = [&](const std::string& why) {
    throw std::invalid_argument("--model " + c.name + ": " + why);
  };
  if (c.kv_heads() < 1 || c.n_head % c.kv_heads() != 0)
    bad("K/V heads " + std::to_string(c.kv_heads()) + " must divide the heads H=" +
        std::to_string(c.n_head));
  if (c.head_dim() % 2 != 0)
    bad("head dim C/H=" + std::to_string(c.head_dim()) + " must be even (rotary pairs)");
  if (c.ffn_hidden < 1 || c.ffn_hidden > 1 << 20) bad("SwiGLU width must be in 1..1048576");
  if (c.tied_head) bad("the Llama block has an untied LM head");
}

uint64_t count_llama_params(const GptConfig& c) {
  const uint64_t C = c.n_embd, L = c.n_layer, V = c.vocab, F = c.ffn_hidden;
  const uint64_t kv = uint64_t(c.kv_heads()) * c.head_dim();
  // per block: 2 RMSNorm gains C, wq C², wk and wv C·kv each, wo C², w1 w3 w2 C·F each
  const uint64_t block = 2 * C + 2 * C * C + 2 * C * kv + 3 * C * F;
  return V * C + L * block + C + V * C;  // embedding, blocks, final norm, untied head
}

ModelLayout make_llama_layout(const GptConfig& c) {
  LayoutBuilder layout(c);
  const int C = c.n_embd, V = c.vocab, L = c.n_layer, F = c.ffn_hidden;
  const int kv = c.kv_heads() * c.head_dim();
  layout.module("embedding", ModuleKind::kEmbedding, 0,
                {layout.tensor("tok_embeddings.weight", {V, C}, 0, true, InitKind::kNormal)});
  for (int b = 0; b < L; ++b) {
    const int s = b + 1;
    const std::string p = "layers." + std::to_string(b) + ".";
    layout.module(p + "attention_norm", ModuleKind::kRmsNorm, s,
                  {layout.tensor(p + "attention_norm.weight", {C}, s, false, InitKind::kOnes)});
    layout.module(p + "attn.qkv", ModuleKind::kLinear, s,
                  {layout.tensor(p + "attn.qkv.weight", {C + 2 * kv, C}, s, true,
                                 InitKind::kNormal)});
    layout.module(p + "attn.proj", ModuleKind::kLinear, s,
                  {layout.tensor(p + "attn.proj.weight", {C, C}, s, true,
                                 InitKind::kNormalResidual)});
    layout.module(p + "ffn_norm", ModuleKind::kRmsNorm, s,
                  {layout.tensor(p + "ffn_norm.weight", {C}, s, false, InitKind::kOnes)});
    layout.module(p + "mlp.gate_up", ModuleKind::kLinear, s,
                  {layout.tensor(p + "mlp.gate_up.weight", {2 * F, C}, s, true,
                                 InitKind::kNormal)});
    layout.module(p + "mlp.down", ModuleKind::kLinear, s,
                  {layout.tensor(p + "mlp.down.weight", {C, F}, s, true,
                                 InitKind::kNormalResidual)});
  }
  const int h = L + 1;
  layout.module("norm", ModuleKind::kRmsNorm, h,
                {layout.tensor("norm.weight", {C}, h, false, InitKind::kOnes)});
  layout.module("lm_head", ModuleKind::kLmHead, h,
                {layout.tensor("output.weight", {V, C}, h, true, InitKind::kNormal)});
  return layout.take();
}

double llama_flops_per_step(const GptConfig& c, uint64_t tokens) {
  const double C = c.n_embd, L = c.n_layer, T = c.seq_len, V = c.vocab, F = c.ffn_hidden;
  const double kv = double(c.kv_heads()) * c.head_dim();
  const double n_matmul = L * (2.0 * C * C + 2.0 * C * kv + 3.0 * C * F) + V * C;
  return 6.0 * n_matmul * double(tokens) + 12.0 * L * C * T * double(tokens);
}

const char* llama_flop_formula() {
  return "6*N_matmul*tokens + 12*L*C*T*tokens, N_matmul = L*(2*C^2 + 2*C*KV*hd + 3*C*F) + V*C "
         "(per block wq and wo C^2 each, wk and wv C*KV*hd each under grouped-query attention "
         "with KV K/V heads of hd = C/H, SwiGLU w1 w3 w2 C*F each, plus the untied LM head; "
         "RMSNorm gains and the embedding lookup excluded; attention over all H query heads and "
         "the full TxT, not the causal half; PaLM appendix B)";
}

}  // namespace sb
