// Activation checkpointing's block selection, step visit order and recompute FLOPs (see header).
#include "harness/model/checkpointing.h"

#include <charconv>
#include <stdexcept>

namespace sb {

int parse_activation_checkpointing(std::string_view s, int n_layer) {
  if (s == "none") return 0;
  if (s == "block") return 1;
  if (s == "op") return kCheckpointOp;
  const auto bad = [&] {
    return std::invalid_argument("--activation-checkpointing " + std::string(s) +
                                 ": allowed none|block|every-K|op, K in 1.." +
                                 std::to_string(n_layer) + " (the model's layers)");
  };
  if (s.rfind("every-", 0) != 0) throw bad();
  const std::string_view k = s.substr(6);
  int every = 0;
  auto [ptr, ec] = std::from_chars(k.data(), k.data() + k.size(), every);
  if (k.empty() || ec != std::errc() || ptr != k.data() + k.size() || every < 1 || every > n_layer)
    throw bad();
  return every;
}

std::string activation_checkpointing_name(int every) {
  if (every == 0) return "none";
  if (every == 1) return "block";
  if (every == kCheckpointOp) return "op";
  return "every-" + std::to_string(every);
}

bool is_op_checkpointing(const GptConfig& c) { return c.checkpoint_every == kCheckpointOp; }

bool is_checkpointed(const GptConfig& c, int layer) {
  if (is_op_checkpointing(c)) return true;
  return c.checkpoint_every > 0 && (layer + 1) % c.checkpoint_every == 0;
}

int checkpointed_blocks(const GptConfig& c) {
  if (is_op_checkpointing(c)) return c.n_layer;
  return c.checkpoint_every > 0 ? c.n_layer / c.checkpoint_every : 0;
}

std::vector<ModuleVisit> step_visits(const ModelLayout& layout) {
  const auto& mods = layout.modules;
  const int n = int(mods.size()), L = layout.num_segments - 2;
  std::vector<ModuleVisit> v;
  for (int m = 0; m < n; ++m) v.push_back({m, ModulePass::kForward});
  for (int m = n - 1; m >= 0; --m) {
    const int seg = mods[size_t(m)].segment;
    const bool block_starts = m == n - 1 || mods[size_t(m) + 1].segment != seg;
    if (block_starts && seg >= 1 && seg <= L && is_checkpointed(layout.config, seg - 1))
      for (int r = 0; r < n; ++r)
        if (mods[size_t(r)].segment == seg) v.push_back({r, ModulePass::kRecompute});
    v.push_back({m, ModulePass::kBackward});
  }
  return v;
}

double recompute_flops_per_step(const GptConfig& c, uint64_t tokens) {
  const double C = c.n_embd, T = c.seq_len;
  if (is_op_checkpointing(c)) {  // the recomputed projections: attn.proj C², fc_proj 4C² (wo, w2)
    const double proj = c.arch == ArchKind::kLlama ? C * C + C * c.ffn_hidden : 5.0 * C * C;
    return double(c.n_layer) * 2.0 * proj * double(tokens);
  }
  // A block's matmul weights: GPT-2 12C²; Llama wq, wo C² each, wk, wv C·KV·hd each, SwiGLU's
  // w1, w3, w2 C·F each (llama_flops_per_step's N_matmul per layer).
  const double block =
      c.arch == ArchKind::kLlama
          ? 2.0 * C * C + 2.0 * C * c.kv_heads() * c.head_dim() + 3.0 * C * c.ffn_hidden
          : 12.0 * C * C;
  return double(checkpointed_blocks(c)) * (2.0 * block + 4.0 * C * T) * double(tokens);
}

// The recompute's text by block: GPT-2's, then Llama's.
constexpr const char* kHardwareFlopFormulas[] = {
    "model FLOPs + n_ckpt*(24*C^2 + 4*C*T)*tokens: each checkpointed block's forward (its "
    "matmuls 2*12*C^2 and attention's scores and values 4*C*T per token) runs again in backward; "
    "n_ckpt = L (block) or floor(L/K) (every-K), 0 without checkpointing; op: L*2*5*C^2*tokens "
    "(attn.proj and fc_proj recomputed)",
    "model FLOPs + n_ckpt*(2*(2*C^2 + 2*C*KV*hd + 3*C*F) + 4*C*T)*tokens: each checkpointed "
    "Llama block's forward (its matmuls wq, wo C^2, wk, wv C*KV*hd, w1, w3, w2 C*F, and "
    "attention's scores and values 4*C*T per token) runs again in backward; n_ckpt = L (block) "
    "or floor(L/K) (every-K), 0 without checkpointing; op: L*2*(C^2 + C*F)*tokens (wo and w2 "
    "recomputed)"};

const char* hardware_flop_formula() { return kHardwareFlopFormulas[0]; }
const char* hardware_flop_formula(const GptConfig& c) {
  return kHardwareFlopFormulas[c.arch == ArchKind::kLlama ? 1 : 0];
}

}  // namespace sb
