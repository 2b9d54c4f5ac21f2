// Model shapes for the predictor (see header): layouts from the run's make_layout, cached.
#include "harness/predict/model_shape.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include "harness/model/gpt.h"
#include "harness/predict/activation_terms.h"

namespace sb {
namespace {

struct Alias {
  const char* name;
  int L, C, H;
};
// GPT-3 family (Brown et al. 2020, Table 2.1): n_layers, d_model, n_heads; context 2048. The
// table gives 13B d_model 5140 with 40 heads of 128; 5120 = 40 x 128 is what the heads imply.
constexpr Alias kAliases[] = {{"gpt3-1.3b", 24, 2048, 16},
                              {"gpt3-2.7b", 32, 2560, 32},
                              {"gpt3-6.7b", 32, 4096, 32},
                              {"gpt3-13b", 40, 5120, 40},
                              {"gpt3-175b", 96, 12288, 96}};

void finish(ModelShape& s) { s.num_params = s.layout.num_params(); }

std::string key_of(const GptConfig& c) {
  return std::to_string(c.n_layer) + "," + std::to_string(c.n_embd) + "," +
         std::to_string(c.n_head) + "," + std::to_string(c.seq_len) + "," +
         std::to_string(c.vocab) + "/" + std::to_string(c.positions()) + (c.tied_head ? "t" : "u") +
         attention_name(c.attention) + cross_entropy_name(c.cross_entropy) + "/ac" + std::to_string(c.checkpoint_every) + "/" +
         arch_name(c.arch) + "/" + std::to_string(c.kv_heads()) + "," +
         std::to_string(c.ffn_hidden) + "," + std::to_string(c.rope_theta);
}

std::mutex g_mu;
std::map<std::string, std::shared_ptr<const ModelShape>>& cache() {
  static std::map<std::string, std::shared_ptr<const ModelShape>> c;
  return c;
}

}  // namespace

std::vector<std::string> predict_model_aliases() {
  std::vector<std::string> v;
  for (const Alias& a : kAliases) v.emplace_back(a.name);
  return v;
}

GptConfig parse_predict_model(const std::string& spec, const std::string& arch) {
  for (const Alias& a : kAliases)
    if (spec == a.name) {
      if (!arch.empty() && parse_arch(arch) != ArchKind::kGpt2)
        throw std::invalid_argument("--arch " + arch + ": --model " + spec + " is a gpt2 alias");
      return GptConfig{a.name, a.L, a.C, a.H, 2048, 50304, 0, true};
    }
  try {
    return parse_model(spec, arch);
  } catch (const std::invalid_argument& e) {
    std::string names;
    for (const Alias& a : kAliases) names += std::string("|") + a.name;
    throw std::invalid_argument(std::string(e.what()) + " (predict also accepts " +
                                names.substr(1) + ")");
  }
}

std::shared_ptr<const ModelShape> model_shape(const GptConfig& c) {
  const std::string key = key_of(c);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = cache().find(key);
    if (it != cache().end()) return it->second;
  }
  validate(c);
  auto s = std::make_shared<ModelShape>();
  s->config = c;
  s->layout = make_layout(c);
  finish(*s);
  std::lock_guard<std::mutex> lock(g_mu);
  if (cache().size() > 256) cache().clear();  // a sweep over many shapes stays bounded
  return cache().emplace(key, std::move(s)).first->second;
}

std::shared_ptr<const ModelShape> bare_shape(uint64_t params, int seq_len) {
  if (params == 0) throw std::invalid_argument("--params: must be positive");
  if (seq_len < 1) throw std::invalid_argument("--seq: must be positive");
  auto s = std::make_shared<ModelShape>();
  s->bare = true;
  s->config.name = "params=" + std::to_string(params);
  s->config.n_layer = 0;  // no blocks: FSDP's wrap policies see one root unit
  s->config.seq_len = seq_len;
  s->layout.config = s->config;
  s->layout.num_segments = 1;
  // One 1-D tensor of the whole count: FSDP2's per-parameter shards chunk its dim 0 (each
  // element a row, padded to the shard count) as every other strategy's flat buffer does.
  s->layout.tensors.push_back({"params", params, {int64_t(params)}, 0, true, InitKind::kZeros});
  s->layout.modules.push_back({"params", ModuleKind::kLinear, 0, {0}});
  finish(*s);
  return s;
}

namespace {

ActivationTerms gpt_activation_terms(const GptConfig& c) {
  const uint64_t C = c.n_embd;
  // Per token: per layer residual2 and ln1/ln2 mean, rstd; saved, 16 of a layer's 18 C (all
  // but the residuals: activation_formula); once encoded, lnf, dresidual, dbtc, dqkv 3,
  // dfch_gelu 4, dfch 4 and lnf mean, rstd.
  // op checkpointing keeps qkv 3C, atty C and fc 4C per layer.
  // Held: residual2, and encoded, dresidual, dbtc in the stream's dtype; lnf (the head's bf16
  // input copy), dqkv, dfch_gelu, dfch in bf16; attproj and fcproj for one layer (transient).
  return {.per_slot = C + 4, .saved = 16 * C, .op_saved = 8 * C, .once = 15 * C + 2,
          .per_slot_stream = C, .once_stream = 3 * C, .once_bf16 = 12 * C, .transient = 2 * C};
}

}  // namespace

uint64_t activation_bytes(const GptConfig& c, int batch, bool bf16) {
  if (c.arch == ArchKind::kLlama) return llama_activation_bytes(c, batch, bf16);
  return activation_bytes_of(c, batch, bf16, gpt_activation_terms(c));
}

uint64_t held_activation_bytes(const GptConfig& c, int batch, bool bf16, bool stream_bf16) {
  const ActivationTerms t =
      c.arch == ArchKind::kLlama ? llama_activation_terms(c) : gpt_activation_terms(c);
  return held_activation_bytes_of(c, batch, bf16, stream_bf16, t);
}

const char* activation_formula() {
  return "4*(L*(18*B*T*C + 4*B*T + A) + 15*B*T*C + 2*B*T + 2*B*T*V + A) + 8*B*T bytes "
         "(fp32); bf16-mixed: 16*B*T*C of each layer's 18 (LayerNorm outputs as the matmuls' "
         "bf16 input copies, qkv, attention output, projections, fc, GELU) at 2 bytes, plus "
         "one layer of them in fp32 as work: 4*(L*(2*B*T*C + 4*B*T + A) + 31*B*T*C + 2*B*T + "
         "2*B*T*V + A) + 2*16*L*B*T*C + 8*B*T; A = B*NH*T (--attention fused: one log-sum-exp "
         "per query row; backward's row deltas) or B*NH*T^2 (naive: the TxT probabilities; "
         "backward's scratch). gpt.cc's activations kept for backward, one layer of fp32 "
         "activation gradients, int32 tokens/targets. --activation-checkpointing: in every "
         "per-layer term but one B*T*C (the block output, the next block's input) L becomes "
         "S = L - n_ckpt + 1 (the kept layers and one recompute slot; S = L without). The loss's "
         "2*B*T*V floats are --cross-entropy full in fp32: see formulas.cross_entropy. "
         "--activation-checkpointing op: S = 1, but the tensors op keeps (GPT-2 qkv, atty, fc: "
         "8*B*T*C; Llama qkv, atty, w1|w3: B*T*(4*C + 2*F)) and A over L";
}

const char* cross_entropy_formula() {
  return "full: 8*B*T*V bytes (fp32 logits, the loss's upcast and later dlogits, and fp32 "
         "probabilities), + 2*B*T*V under bf16-mixed (the head's bf16 logits); chunked: the "
         "logits, then dlogits, 4*B*T*V (fp32) or 2*B*T*V (bf16-mixed), + fp32 chunks of "
         "R = ceil(B*T/8) rows: 4*R*V (probabilities) or 8*R*V (bf16-mixed: logits and "
         "probabilities)";
}

uint64_t bf16_operand_bytes(const GptConfig& c, int batch) {
  if (c.arch == ArchKind::kLlama) return llama_bf16_operand_bytes(c, batch);
  const uint64_t B = uint64_t(batch), T = c.seq_len, C = c.n_embd, NH = c.n_head, V = c.vocab,
                 BT = B * T;
  // Slot A: the LM head's dlogits (dx and dW of its backward), fcproj's input / fc's dout, or
  // one sequence's attention probabilities over all heads (batched per sequence).
  // (fused attention is one fp32 kernel: no cuBLAS operands).
  const uint64_t probs = c.attention == AttentionKind::kNaive ? NH * T * T : 0;
  const uint64_t a = std::max({head_rows(c, B) * V, BT * 4 * C, probs});
  // Slot B: the LM head's weight, fc/fcproj's 4C-wide input in their dW, or their weights.
  const uint64_t b = std::max({V * C, BT * 4 * C, 4 * C * C});
  return 2 * (a + b);
}

const char* bf16_operand_formula() {
  return "2*(max(R*V, 4*B*T*C, NH*T^2 if --attention naive) + max(V*C, 4*B*T*C, 4*C^2)) "
         "bytes: the CUDA device's bf16 copies of the largest op(A) and op(B) matmul operands, kept while bf16 matmuls are on; R = B*T, or ceil(B*T/8) under --cross-entropy chunked";
}

double predict_flops(const ModelShape& m, uint64_t tokens) {
  if (m.bare) return 6.0 * double(m.num_params) * double(tokens);
  return flops_per_step(m.config, tokens);
}

}  // namespace sb
