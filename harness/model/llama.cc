// LlamaModel's forward and backward, read top to bottom like gpt.cc: per block RMSNorm → qkv
// linear → RoPE + GQA sharing → attention (fused or naive) → wo → residual, RMSNorm → w1|w3 →
// SwiGLU → w2 → residual. Owns the activations; never owns, shards or updates parameters.
// Under bf16-mixed the six tensors autocast keeps in bf16 are saved in bf16 (the norms'
// outputs as the matmuls' bf16 input copies, qkv after RoPE, attention output, w1|w3 output,
// SwiGLU output); residuals, RMSNorm statistics, softmax statistics and the loss stay fp32.
#include "harness/model/llama.h"

#include "harness/common/check.h"
#include "harness/model/gpt.h"
#include "harness/model/saved.h"

namespace sb {
namespace {

// A Llama module's only tensor (no biases) as the hooks hand it out, asked only when used.
struct Mod {
  ModelHooks& hooks;
  int tensor;
  const float* w() { return hooks.param(tensor); }
  float* dw() { return hooks.grad(tensor); }
};

// pre hook, body, post hook (as gpt.cc's run_module: post hooks may throw, so no RAII guard).
template <class Body>
void run_module(ModelHooks& hooks, const ModelLayout& layout, int m, bool backward, Body&& body) {
  backward ? hooks.pre_backward(m) : hooks.pre_forward(m);
  Mod mod{hooks, layout.modules[m].tensors.at(0)};
  body(mod);
  backward ? hooks.post_backward(m) : hooks.post_forward(m);
}

}  // namespace

// What the forward keeps for backward, and one layer of scratch (model_shape.h's
// llama_activation_bytes counts it term by term). Per-layer tensors live in their layer's slot
// (saved.h's LayerSlots: checkpointed blocks share one); residual3, the next block's input,
// stays per layer.
struct LlamaModel::Acts {
  TrackedBuffer<int> tokens, targets;                      // [B,T]
  TrackedBuffer<float> encoded;                            // [B,T,C]
  SavedPerLayer rms1, qkv, atty, rms2, h, g;               // [S,B,T,·]: C, 3C, C, C, 2F, F
  TrackedBuffer<float> rstd1, rstd2;                       // [S,B,T]
  TrackedBuffer<float> att;  // naive: [S,B,H,T,T] probabilities; fused: [S,B,H,T] lse
  TrackedBuffer<float> residual2;                          // [S,B,T,C]
  TrackedBuffer<float> residual3;                          // [L,B,T,C]
  TrackedBuffer<float> qkv_raw;  // [B,T,C+2·KV·hd]: forward's projection, backward's gradient
  TrackedBuffer<float> work;     // [B,T,C]: a branch's output, or d of a norm output / atty
  TrackedBuffer<float> rmsf, rstdf;                        // [B,T,C], [B,T]
  TrackedBuffer<float> logits, probs;                      // [B,T,V]; logits become dlogits
  TrackedBuffer<float> dresidual, dqkv, datt, dh, dg;      // C, 3C, att scratch, 2F, F
  size_t att_per_layer = 0, btc = 0, bt = 0;
  std::vector<int> slot_of;
  bool have_forward = false;
  size_t slot(int l) const { return size_t(slot_of[size_t(l)]); }
  float* residual_in(int l) { return l == 0 ? encoded.data() : residual3.data() + (l - 1) * btc; }
  void load_layer(Device& d, int l) {
    for (SavedPerLayer* s : {&rms1, &qkv, &atty, &rms2, &h, &g}) s->load(d, l);
  }
};

LlamaModel::LlamaModel(const GptConfig& config, int batch, Device& device,
                       MemoryTracker& memory, bool bf16_activations)
    : config_(config), layout_(make_layout(config)), batch_(batch), device_(device),
      acts_(std::make_unique<Acts>()) {
  const size_t B = batch, T = config_.seq_len, C = config_.n_embd, L = config_.n_layer,
               H = config_.n_head, V = config_.vocab, F = config_.ffn_hidden, BT = B * T,
               KVD = size_t(config_.kv_heads()) * config_.head_dim();
  auto f = [&](size_t n) { return TrackedBuffer<float>(memory, MemCategory::kActivations, n); };
  const LayerSlots slots(config_);
  const size_t S = slots.count;
  auto saved = [&](size_t n) { return SavedPerLayer(memory, slots, n, bf16_activations); };
  Acts& a = *acts_;
  a.slot_of = slots.of;
  a.bt = BT;
  a.btc = BT * C;
  a.tokens = TrackedBuffer<int>(memory, MemCategory::kActivations, BT);
  a.targets = TrackedBuffer<int>(memory, MemCategory::kActivations, BT);
  a.encoded = f(BT * C);
  a.rms1 = saved(BT * C);
  a.qkv = saved(BT * 3 * C);
  a.atty = saved(BT * C);
  a.rms2 = saved(BT * C);
  a.h = saved(BT * 2 * F);
  a.g = saved(BT * F);
  a.rstd1 = f(S * BT);
  a.rstd2 = f(S * BT);
  a.att_per_layer = config_.attention == AttentionKind::kFused ? B * H * T : B * H * T * T;
  a.att = f(S * a.att_per_layer);
  a.residual2 = f(S * BT * C);
  a.residual3 = f(L * BT * C);
  a.qkv_raw = f(BT * (C + 2 * KVD));
  a.work = f(BT * C);
  a.rmsf = f(BT * C);
  a.rstdf = f(BT);
  a.logits = f(BT * V);
  a.probs = f(BT * V);
  a.dresidual = f(BT * C);
  a.dqkv = f(BT * 3 * C);
  a.datt = f(a.att_per_layer);
  a.dh = f(BT * 2 * F);
  a.dg = f(BT * F);
}

LlamaModel::~LlamaModel() = default;

void LlamaModel::forward_block(int l, ModelHooks& hooks) {
  Acts& a = *acts_;
  Device& d = device_;
  const int B = batch_, T = config_.seq_len, C = config_.n_embd, H = config_.n_head,
            KV = config_.kv_heads(), hd = config_.head_dim(), F = config_.ffn_hidden,
            BT = B * T, m0 = 1 + kLlamaModulesPerBlock * l;
  const float* residual = a.residual_in(l);
  float* residual2 = a.residual2.data() + a.slot(l) * a.btc;
  float* residual3 = a.residual3.data() + l * a.btc;
  float* rstd1 = a.rstd1.data() + a.slot(l) * a.bt;
  float* rstd2 = a.rstd2.data() + a.slot(l) * a.bt;
  float* att = a.att.data() + a.slot(l) * a.att_per_layer;
  run_module(hooks, layout_, m0, false, [&](Mod& m) {
    d.rmsnorm_forward(a.rms1.at(l), rstd1, residual, m.w(), BT, C);
  });
  a.rms1.store(d, l);
  run_module(hooks, layout_, m0 + 1, false, [&](Mod& m) {
    d.linear_forward(a.qkv_raw.data(), a.rms1.at(l), m.w(), nullptr, BT, C, C + 2 * KV * hd);
  });
  d.rope_gqa_forward(a.qkv.at(l), a.qkv_raw.data(), B, T, H, KV, hd, config_.rope_theta);
  a.qkv.store(d, l);
  if (config_.attention == AttentionKind::kFused)
    d.flash_attention_forward(a.atty.at(l), att, a.qkv.at(l), B, T, C, H);
  else
    d.attention_forward(a.atty.at(l), att, a.qkv.at(l), B, T, C, H);
  a.atty.store(d, l);
  run_module(hooks, layout_, m0 + 2, false, [&](Mod& m) {
    d.linear_forward(a.work.data(), a.atty.at(l), m.w(), nullptr, BT, C, C);
  });
  d.copy(residual2, residual, a.btc * sizeof(float));
  d.add_inplace(residual2, a.work.data(), a.btc);
  run_module(hooks, layout_, m0 + 3, false, [&](Mod& m) {
    d.rmsnorm_forward(a.rms2.at(l), rstd2, residual2, m.w(), BT, C);
  });
  a.rms2.store(d, l);
  run_module(hooks, layout_, m0 + 4, false, [&](Mod& m) {
    d.linear_forward(a.h.at(l), a.rms2.at(l), m.w(), nullptr, BT, C, 2 * F);
  });
  a.h.store(d, l);
  d.swiglu_forward(a.g.at(l), a.h.at(l), BT, F);
  a.g.store(d, l);
  run_module(hooks, layout_, m0 + 5, false, [&](Mod& m) {
    d.linear_forward(a.work.data(), a.g.at(l), m.w(), nullptr, BT, F, C);
  });
  d.copy(residual3, residual2, a.btc * sizeof(float));
  d.add_inplace(residual3, a.work.data(), a.btc);
}

float LlamaModel::forward(const int* tokens, const int* targets, ModelHooks& hooks) {
  SB_CHECK(tokens != nullptr && targets != nullptr, "forward needs tokens and targets");
  Acts& a = *acts_;
  Device& d = device_;
  const int B = batch_, T = config_.seq_len, C = config_.n_embd, L = config_.n_layer,
            V = config_.vocab, BT = B * T;
  d.copy_to_device(a.tokens.data(), tokens, a.tokens.bytes());
  d.copy_to_device(a.targets.data(), targets, a.targets.bytes());
  run_module(hooks, layout_, 0, false, [&](Mod& m) {
    d.embedding_forward(a.encoded.data(), a.tokens.data(), m.w(), nullptr, B, T, C);
  });
  for (int l = 0; l < L; ++l) forward_block(l, hooks);
  const int head = 1 + kLlamaModulesPerBlock * L;
  run_module(hooks, layout_, head, false, [&](Mod& m) {
    d.rmsnorm_forward(a.rmsf.data(), a.rstdf.data(), a.residual_in(L), m.w(), BT, C);
  });
  run_module(hooks, layout_, head + 1, false, [&](Mod& m) {
    d.linear_forward(a.logits.data(), a.rmsf.data(), m.w(), nullptr, BT, C, V);
  });
  a.have_forward = true;
  return d.softmax_crossentropy_forward(a.probs.data(), a.logits.data(), a.targets.data(), BT,
                                        V);
}

// dresidual holds d loss / d residual3 of layer l on entry and d loss / d residual on exit.
void LlamaModel::backward_block(int l, ModelHooks& hooks) {
  Acts& a = *acts_;
  Device& d = device_;
  const int B = batch_, T = config_.seq_len, C = config_.n_embd, H = config_.n_head,
            KV = config_.kv_heads(), hd = config_.head_dim(), F = config_.ffn_hidden,
            BT = B * T, m0 = 1 + kLlamaModulesPerBlock * l;
  float* dres = a.dresidual.data();
  float* dx = a.work.data();
  const float* att = a.att.data() + a.slot(l) * a.att_per_layer;
  if (is_checkpointed(config_, l)) {  // rebuild the block's activations from its input
    RecomputeHooks recompute(hooks);
    forward_block(l, recompute);
  }
  a.load_layer(d, l);
  run_module(hooks, layout_, m0 + 5, true, [&](Mod& m) {
    d.linear_backward(a.dg.data(), m.dw(), nullptr, dres, a.g.at(l), m.w(), BT, F, C);
  });
  d.swiglu_backward(a.dh.data(), a.h.at(l), a.dg.data(), BT, F);
  run_module(hooks, layout_, m0 + 4, true, [&](Mod& m) {
    d.linear_backward(dx, m.dw(), nullptr, a.dh.data(), a.rms2.at(l), m.w(), BT, C, 2 * F);
  });
  run_module(hooks, layout_, m0 + 3, true, [&](Mod& m) {  // now d residual2
    d.rmsnorm_backward(dres, m.dw(), dx, a.residual2.data() + a.slot(l) * a.btc, m.w(),
                       a.rstd2.data() + a.slot(l) * a.bt, BT, C);
  });
  run_module(hooks, layout_, m0 + 2, true, [&](Mod& m) {
    d.linear_backward(dx, m.dw(), nullptr, dres, a.atty.at(l), m.w(), BT, C, C);
  });
  if (config_.attention == AttentionKind::kFused)
    d.flash_attention_backward(a.dqkv.data(), a.datt.data(), dx, a.qkv.at(l), a.atty.at(l), att,
                               B, T, C, H);
  else
    d.attention_backward(a.dqkv.data(), a.datt.data(), dx, a.qkv.at(l), att, B, T, C, H);
  d.rope_gqa_backward(a.qkv_raw.data(), a.dqkv.data(), B, T, H, KV, hd, config_.rope_theta);
  run_module(hooks, layout_, m0 + 1, true, [&](Mod& m) {
    d.linear_backward(dx, m.dw(), nullptr, a.qkv_raw.data(), a.rms1.at(l), m.w(), BT, C,
                      C + 2 * KV * hd);
  });
  run_module(hooks, layout_, m0, true, [&](Mod& m) {  // now d residual
    d.rmsnorm_backward(dres, m.dw(), dx, a.residual_in(l), m.w(),
                       a.rstd1.data() + a.slot(l) * a.bt, BT, C);
  });
}

void LlamaModel::backward(ModelHooks& hooks) {
  Acts& a = *acts_;
  SB_CHECK(a.have_forward, "backward without a forward since the last backward");
  a.have_forward = false;  // dlogits overwrite the logits
  Device& d = device_;
  const int B = batch_, T = config_.seq_len, C = config_.n_embd, L = config_.n_layer,
            V = config_.vocab, BT = B * T;
  float* dlogits = a.logits.data();
  d.crossentropy_backward(dlogits, a.probs.data(), a.targets.data(), BT, V, 1.0f / float(BT));
  const int head = 1 + kLlamaModulesPerBlock * L;
  run_module(hooks, layout_, head + 1, true, [&](Mod& m) {
    d.linear_backward(a.work.data(), m.dw(), nullptr, dlogits, a.rmsf.data(), m.w(), BT, C, V);
  });
  d.fill_zero(a.dresidual.data(), a.btc * sizeof(float));
  run_module(hooks, layout_, head, true, [&](Mod& m) {
    d.rmsnorm_backward(a.dresidual.data(), m.dw(), a.work.data(), a.residual_in(L), m.w(),
                       a.rstdf.data(), BT, C);
  });
  for (int l = L - 1; l >= 0; --l) backward_block(l, hooks);
  run_module(hooks, layout_, 0, true, [&](Mod& m) {
    d.embedding_backward(m.dw(), nullptr, a.dresidual.data(), a.tokens.data(), B, T, C);
  });
}

}  // namespace sb
