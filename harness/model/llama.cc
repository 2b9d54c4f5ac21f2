// LlamaModel's forward and backward, read top to bottom like gpt.cc: per block RMSNorm → qkv
// linear → RoPE + GQA sharing → attention (fused or naive) → wo → residual, RMSNorm → w1|w3 →
// SwiGLU → w2 → residual. Owns the activations; never owns, shards or updates parameters.
// Under bf16-mixed the six tensors autocast keeps in bf16 are saved in bf16 (the norms'
// outputs as the matmuls' bf16 input copies, qkv after RoPE, attention output, w1|w3 output,
// SwiGLU output); residuals, RMSNorm statistics, softmax statistics and the loss stay fp32.
#include "harness/model/llama.h"

#include "harness/model/gpt.h"
#include "harness/model/model_glue.h"
#include "harness/model/saved.h"

namespace sb {

// What the forward keeps for backward, and one layer of scratch (model_shape.h's
// llama_activation_bytes counts it term by term). Per-layer tensors live in their layer's slot
// (saved.h's LayerSlots: checkpointed blocks share one); residual3, the next block's input,
// stays per layer. The tokens, logits and probabilities are the ends' (model_glue.h).
struct LlamaModel::Acts {
  DecoderEnds ends;
  TrackedBuffer<float> encoded;                            // [B,T,C]
  SavedPerLayer rms1, qkv, atty, rms2, h, g;               // [S,B,T,·]: C, 3C, C, C, 2F, F
  TrackedBuffer<float> rstd1, rstd2;                       // [S,B,T]
  TrackedBuffer<float> att;  // naive: [S,B,H,T,T] probabilities; fused: [S,B,H,T] lse
  TrackedBuffer<float> residual2;                          // [S,B,T,C]
  TrackedBuffer<float> residual3;                          // [L,B,T,C]
  TrackedBuffer<float> qkv_raw;  // [B,T,C+2·KV·hd]: forward's projection, backward's gradient
  TrackedBuffer<float> work;     // [B,T,C]: a branch's output, or d of a norm output / atty
  TrackedBuffer<float> rmsf, rstdf;                        // [B,T,C], [B,T]
  TrackedBuffer<float> dresidual, dqkv, datt, dh, dg;      // C, 3C, att scratch, 2F, F
  size_t att_per_layer = 0, btc = 0, bt = 0;
  std::vector<int> slot_of, op_slot_of;  // op_slot_of: qkv, atty, att, h (see gpt.cc)
  size_t slot(int l) const { return size_t(slot_of[size_t(l)]); }
  size_t op_slot(int l) const { return size_t(op_slot_of[size_t(l)]); }
  float* residual_in(int l) { return l == 0 ? encoded.data() : residual3.data() + (l - 1) * btc; }
  void load_layer(Device& d, int l) {
    for (SavedPerLayer* s : {&rms1, &qkv, &atty, &rms2, &h, &g}) s->load(d, l);
  }
};

LlamaModel::LlamaModel(const GptConfig& config, int batch, Device& device,
                       MemoryTracker& memory, bool bf16_activations)
    : config_(config), layout_(make_layout(config)), batch_(batch), device_(device),
      acts_(std::make_unique<Acts>()) {
  dims_ = {batch, config_.seq_len, config_.n_embd, config_.n_head, config_.kv_heads(),
           config_.head_dim(), config_.ffn_hidden, batch * config_.seq_len};
  const size_t B = batch, T = config_.seq_len, C = config_.n_embd, L = config_.n_layer,
               F = config_.ffn_hidden, BT = B * T,
               KVD = size_t(config_.kv_heads()) * config_.head_dim();
  const ActivationBuffers buf(memory, config_);  // saved.h: each buffer's Held
  const LayerSlots slots(config_), op_slots = LayerSlots::for_op_saved(config_);
  const size_t S = slots.count;
  auto saved = [&](size_t n) { return SavedPerLayer(memory, slots, n, bf16_activations); };
  auto op_saved = [&](size_t n) {
    return SavedPerLayer(memory, op_slots, n, bf16_activations);
  };
  Acts& a = *acts_;
  a.slot_of = slots.of;
  a.op_slot_of = op_slots.of;
  a.bt = BT;
  a.btc = BT * C;
  a.ends = DecoderEnds(layout_, device_, memory, batch, bf16_activations);
  a.encoded = buf.stream(BT * C);
  a.rms1 = saved(BT * C);
  a.qkv = op_saved(BT * 3 * C);
  a.atty = op_saved(BT * C);
  a.rms2 = saved(BT * C);
  a.h = op_saved(BT * 2 * F);
  a.g = saved(BT * F);
  a.rstd1 = buf.f32(S * BT);
  a.rstd2 = buf.f32(S * BT);
  a.att_per_layer = attention_saved_floats(config_, B);
  a.att = buf.f32(op_slots.count * a.att_per_layer, buf.attention);
  a.residual2 = buf.stream(S * BT * C);
  a.residual3 = buf.stream(L * BT * C);
  a.qkv_raw = buf.half(BT * (C + 2 * KVD));
  a.work = buf.stream(BT * C);
  a.rmsf = buf.half(BT * C);  // the head saves autocast's bf16 copy
  a.rstdf = buf.f32(BT);
  a.dresidual = buf.stream(BT * C);
  a.dqkv = buf.half(BT * 3 * C);
  a.datt = buf.f32(a.att_per_layer, buf.attention);
  a.dh = buf.half(BT * 2 * F);
  a.dg = buf.half(BT * F);
}

LlamaModel::~LlamaModel() = default;

// cached: op checkpointing's recompute (gpt.cc's block_forward): qkv with its RoPE, attention
// and w1|w3 keep their saved outputs; their modules' hooks fire, their kernels do not run.
void LlamaModel::forward_block(int l, ModelHooks& hooks, bool cached) {
  Acts& a = *acts_;
  Device& d = device_;
  const auto [B, T, C, H, KV, hd, F, BT] = dims_;
  const int m0 = 1 + kLlamaModulesPerBlock * l;
  const float* residual = a.residual_in(l);
  float* residual2 = a.residual2.data() + a.slot(l) * a.btc;
  float* residual3 = a.residual3.data() + l * a.btc;
  float* rstd1 = a.rstd1.data() + a.slot(l) * a.bt;
  float* rstd2 = a.rstd2.data() + a.slot(l) * a.bt;
  float* att = a.att.data() + a.op_slot(l) * a.att_per_layer;
  auto saved_op = [&](SavedPerLayer& out, auto&& compute) { run_kept_op(d, out, l, cached, compute); };
  run_module(hooks, layout_, m0, false, [&](Module& m) {
    d.rmsnorm_forward(a.rms1.at(l), rstd1, residual, m.param(0), BT, C);
  });
  a.rms1.store(d, l);
  run_module(hooks, layout_, m0 + 1, false, [&](Module& m) {
    saved_op(a.qkv, [&] {
      d.linear_forward(a.qkv_raw.data(), a.rms1.at(l), m.param(0), nullptr, BT, C,
                       C + 2 * KV * hd);
      d.rope_gqa_forward(a.qkv.at(l), a.qkv_raw.data(), B, T, H, KV, hd, config_.rope_theta);
    });
  });
  saved_op(a.atty, [&] { run_attention_forward(d, config_, a.atty.at(l), att, a.qkv.at(l), B); });
  run_module(hooks, layout_, m0 + 2, false, [&](Module& m) {
    d.linear_forward(a.work.data(), a.atty.at(l), m.param(0), nullptr, BT, C, C);
  });
  residual_add(d, residual2, residual, a.work.data(), a.btc);
  run_module(hooks, layout_, m0 + 3, false, [&](Module& m) {
    d.rmsnorm_forward(a.rms2.at(l), rstd2, residual2, m.param(0), BT, C);
  });
  a.rms2.store(d, l);
  run_module(hooks, layout_, m0 + 4, false, [&](Module& m) {
    saved_op(a.h, [&] { d.linear_forward(a.h.at(l), a.rms2.at(l), m.param(0), nullptr, BT, C, 2 * F); });
  });
  d.swiglu_forward(a.g.at(l), a.h.at(l), BT, F);
  a.g.store(d, l);
  run_module(hooks, layout_, m0 + 5, false, [&](Module& m) {
    d.linear_forward(a.work.data(), a.g.at(l), m.param(0), nullptr, BT, F, C);
  });
  residual_add(d, residual3, residual2, a.work.data(), a.btc);
}

float LlamaModel::forward(const int* tokens, const int* targets, ModelHooks& hooks) {
  Acts& a = *acts_;
  Device& d = device_;
  const int C = config_.n_embd, L = config_.n_layer, BT = batch_ * config_.seq_len;
  a.ends.embed(hooks, tokens, targets, a.encoded.data());
  for (int l = 0; l < L; ++l) forward_block(l, hooks);
  const int norm = 1 + kLlamaModulesPerBlock * L;  // the final RMSNorm; the LM head follows
  run_module(hooks, layout_, norm, false, [&](Module& m) {
    d.rmsnorm_forward(a.rmsf.data(), a.rstdf.data(), a.residual_in(L), m.param(0), BT, C);
  });
  return a.ends.head_forward(hooks, a.rmsf.data());
}

// dresidual holds d loss / d residual3 of layer l on entry and d loss / d residual on exit.
void LlamaModel::backward_block(int l, ModelHooks& hooks) {
  Acts& a = *acts_;
  Device& d = device_;
  const auto [B, T, C, H, KV, hd, F, BT] = dims_;
  const int m0 = 1 + kLlamaModulesPerBlock * l;
  float* dres = a.dresidual.data();
  float* dx = a.work.data();
  const float* att = a.att.data() + a.op_slot(l) * a.att_per_layer;
  recompute_if_checkpointed(config_, l, hooks, [&](ModelHooks& redo) {
    forward_block(l, redo, is_op_checkpointing(config_));
  });
  a.load_layer(d, l);
  run_module(hooks, layout_, m0 + 5, true, [&](Module& m) {
    d.linear_backward(a.dg.data(), m.grad(0), nullptr, dres, a.g.at(l), m.param(0), BT, F, C);
  });
  d.swiglu_backward(a.dh.data(), a.h.at(l), a.dg.data(), BT, F);
  run_module(hooks, layout_, m0 + 4, true, [&](Module& m) {
    d.linear_backward(dx, m.grad(0), nullptr, a.dh.data(), a.rms2.at(l), m.param(0), BT, C, 2 * F);
  });
  run_module(hooks, layout_, m0 + 3, true, [&](Module& m) {  // now d residual2
    d.rmsnorm_backward(dres, m.grad(0), dx, a.residual2.data() + a.slot(l) * a.btc, m.param(0),
                       a.rstd2.data() + a.slot(l) * a.bt, BT, C);
  });
  run_module(hooks, layout_, m0 + 2, true, [&](Module& m) {
    d.linear_backward(dx, m.grad(0), nullptr, dres, a.atty.at(l), m.param(0), BT, C, C);
  });
  run_attention_backward(d, config_, a.dqkv.data(), a.datt.data(), dx, a.qkv.at(l), a.atty.at(l),
                         att, B);
  d.rope_gqa_backward(a.qkv_raw.data(), a.dqkv.data(), B, T, H, KV, hd, config_.rope_theta);
  run_module(hooks, layout_, m0 + 1, true, [&](Module& m) {
    d.linear_backward(dx, m.grad(0), nullptr, a.qkv_raw.data(), a.rms1.at(l), m.param(0), BT, C,
                      C + 2 * KV * hd);
  });
  run_module(hooks, layout_, m0, true, [&](Module& m) {  // now d residual
    d.rmsnorm_backward(dres, m.grad(0), dx, a.residual_in(l), m.param(0),
                       a.rstd1.data() + a.slot(l) * a.bt, BT, C);
  });
}

void LlamaModel::backward(ModelHooks& hooks) {
  Acts& a = *acts_;
  Device& d = device_;
  const int C = config_.n_embd, L = config_.n_layer, BT = batch_ * config_.seq_len;
  a.ends.head_backward(hooks, a.rmsf.data(), a.work.data());
  d.fill_zero(a.dresidual.data(), a.btc * sizeof(float));
  const int norm = 1 + kLlamaModulesPerBlock * L;
  run_module(hooks, layout_, norm, true, [&](Module& m) {
    d.rmsnorm_backward(a.dresidual.data(), m.grad(0), a.work.data(), a.residual_in(L), m.param(0),
                       a.rstdf.data(), BT, C);
  });
  for (int l = L - 1; l >= 0; --l) backward_block(l, hooks);
  a.ends.embedding_backward(hooks, a.dresidual.data());
}

}  // namespace sb
