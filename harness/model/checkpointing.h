// Activation checkpointing (--activation-checkpointing none|block|every-K|op): which transformer
// blocks keep only their input in forward and run their forward again inside backward (op:
// every block keeps its input and its selected ops' outputs, and recomputes the rest), the
// hooks that recompute fires (so each strategy decides what a recompute gathers), the order in
// which a step visits the leaf modules, and the FLOPs the recompute adds (hardware FLOPs).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "harness/model/gpt.h"

namespace sb {

// "none" -> 0, "block" -> 1, "every-K" -> K (1 <= K <= n_layer): block l (0-based) is
// checkpointed when (l + 1) % K == 0, as torchtitan's selective_ac_option "K" wraps every K-th
// transformer block (torchtitan/distributed/activation_checkpoint.py _apply_layer_sac: a layer
// counter from 1, checkpoint_wrapper when count % K == 0). "op" -> kCheckpointOp: torchtitan's
// per-op selective AC (torchtitan/distributed/activation_checkpoint.py, _apply_op_sac at
// 114151ad4^, SelectiveAC._wrap_block's policy today): in every block the outputs of the
// compute-intensive ops are saved — attention (SDPA: output and log-sum-exp) and the block's
// matmuls except every second one (the policy's mm_count % 2 == 0 -> PREFER_RECOMPUTE) — and
// the rest is recomputed in backward. The GPT-2 block's matmuls are qkv, attn.proj, fc,
// fc_proj: qkv and fc are saved, the projections recomputed (Llama: qkv and w1|w3 saved, wo and
// w2 recomputed). Throws std::invalid_argument naming --activation-checkpointing.
constexpr int kCheckpointOp = -1;
int parse_activation_checkpointing(std::string_view s, int n_layer);
bool is_op_checkpointing(const GptConfig& c);
std::string activation_checkpointing_name(int every);
bool is_checkpointed(const GptConfig& c, int layer);
int checkpointed_blocks(const GptConfig& c);

// One leaf module's hooks in a step: forward, its recompute inside backward, backward.
enum class ModulePass { kForward, kRecompute, kBackward };
struct ModuleVisit {
  int module;
  ModulePass pass;
};
// Every module visit of one forward + backward in hook order: the modules forward, then
// backward in reverse, where a checkpointed block's backward is preceded by its recompute (its
// modules in forward order). Blocks are the layout's segments 1..L.
std::vector<ModuleVisit> step_visits(const ModelLayout& layout);

// Routes a block's forward code through the recompute hooks of the hooks it wraps, so the
// model runs the very same forward and the strategy sees pre_recompute/post_recompute.
class RecomputeHooks final : public ModelHooks {
 public:
  explicit RecomputeHooks(ModelHooks& inner) : inner_(inner) {}
  void pre_forward(int m) override { inner_.pre_recompute(m); }
  void post_forward(int m) override { inner_.post_recompute(m); }
  void pre_backward(int m) override { inner_.pre_backward(m); }
  void post_backward(int m) override { inner_.post_backward(m); }
  const float* param(int t) override { return inner_.param(t); }
  float* grad(int t) override { return inner_.grad(t); }

 private:
  ModelHooks& inner_;
};

// The forward FLOPs recomputed in one step for `tokens` tokens: per checkpointed block its
// matmuls (2 * 12C^2 per token; Llama 2 * (2C^2 + 2·C·KV·hd + 3·C·F)) and attention's scores
// and values (4*C*T per token), a third of the block's share of flops_per_step; under op the
// recomputed projections only (2 * 5C^2; Llama 2 * (C^2 + C·F)). Hardware FLOPs =
// flops_per_step + this.
double recompute_flops_per_step(const GptConfig& c, uint64_t tokens);
const char* hardware_flop_formula();                    // the GPT-2 block's
const char* hardware_flop_formula(const GptConfig& c);  // c's block's

}  // namespace sb
