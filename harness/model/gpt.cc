// GptModel's forward and backward, read top to bottom as llm.c's train_gpt2.c, with every leaf
// module bracketed by the hooks so a strategy can gather/free/reduce around it. Owns the
// activations and the backward scratch; never owns, shards or updates parameters.
#include "harness/model/gpt.h"

#include "harness/common/check.h"
#include "harness/model/checkpointing.h"
#include "harness/model/llama.h"
#include "harness/model/model_glue.h"
#include "harness/model/saved.h"

namespace sb {
namespace {

GptConfig validated(const GptConfig& c) {
  validate(c);  // throws std::invalid_argument naming --model
  return c;
}

}  // namespace

// Forward activations kept for backward: llm.c's ActivationTensors less `preatt` (both devices
// softmax the scores in place) and `losses` (the loss is reduced on the device); the tokens,
// logits and probabilities are the ends' (model_glue.h's DecoderEnds).
// Backward scratch is one layer deep, not llm.c's full per-layer copy: each layer's activation
// gradients are dead once the layer below has consumed them, so d* buffers are reused.
struct GptModel::Acts {
  DecoderEnds ends;
  TrackedBuffer<float> encoded;                            // [B,T,C]
  // Saved: bf16 under bf16-mixed (matmul inputs' copies and outputs); TrackedBuffer: fp32
  // always (the residual stream, LayerNorm statistics, softmax probabilities or lse, loss).
  SavedPerLayer ln1, qkv, atty, attproj, ln2, fch, fch_gelu, fcproj;  // [L,B,T,C] (qkv 3C, fch* 4C)
  TrackedBuffer<float> ln1_mean, ln1_rstd;                 // [L,B,T] x2
  TrackedBuffer<float> att;  // naive: [L,B,NH,T,T] probabilities; fused: [L,B,NH,T] lse
  TrackedBuffer<float> residual2, residual3;               // [L,B,T,C]
  TrackedBuffer<float> ln2_mean, ln2_rstd;                 // [L,B,T] x2
  TrackedBuffer<float> lnf, lnf_mean, lnf_rstd;            // [B,T,C], [B,T] x2
  TrackedBuffer<float> dresidual, dbtc;                    // [B,T,C]
  TrackedBuffer<float> dqkv;                               // [B,T,3C]
  TrackedBuffer<float> datt;                               // [B,NH,T,T] or fused [B,NH,T]
  TrackedBuffer<float> dfch_gelu, dfch;                    // [B,T,4C]
  // Layer l's slot in the per-layer buffers (activation checkpointing: every checkpointed block
  // shares one slot; the residual stream's block outputs, residual3, stay per layer); op_slot_of
  // for what op checkpointing keeps per layer (qkv, atty, att, fch).
  std::vector<int> slot_of, op_slot_of;

  // Layer l's slices of the per-layer buffers.
  struct Layer {
    float *residual, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *attproj, *residual2, *ln2,
        *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *fcproj, *residual3;
  };
  size_t att_per_layer = 0;  // B·NH·T² (naive) or B·NH·T (fused)
  Layer layer(int l, size_t BT, size_t C) {
    const size_t btc = BT * C, s = size_t(slot_of[size_t(l)]), so = size_t(op_slot_of[size_t(l)]);
    Layer y;
    y.residual = l == 0 ? encoded.data() : residual3.data() + (l - 1) * btc;
    y.ln1 = ln1.at(l);
    y.ln1_mean = ln1_mean.data() + s * BT;
    y.ln1_rstd = ln1_rstd.data() + s * BT;
    y.qkv = qkv.at(l);
    y.atty = atty.at(l);
    y.att = att.data() + so * att_per_layer;
    y.attproj = attproj.at(l);
    y.residual2 = residual2.data() + s * btc;
    y.ln2 = ln2.at(l);
    y.ln2_mean = ln2_mean.data() + s * BT;
    y.ln2_rstd = ln2_rstd.data() + s * BT;
    y.fch = fch.at(l);
    y.fch_gelu = fch_gelu.at(l);
    y.fcproj = fcproj.at(l);
    y.residual3 = residual3.data() + l * btc;
    return y;
  }
  // Layer l's bf16-saved tensors back into their fp32 work for its backward (no-op in fp32).
  void load_layer(Device& d, int l) {
    for (SavedPerLayer* s : {&ln1, &qkv, &atty, &ln2, &fch, &fch_gelu}) s->load(d, l);
  }
};

GptModel::GptModel(const GptConfig& config, int batch, Device& device, MemoryTracker& memory,
                   bool bf16_activations)
    : config_(validated(config)), layout_(make_layout(config_)), batch_(batch), device_(device),
      memory_(memory), acts_(std::make_unique<Acts>()) {
  SB_CHECK(batch > 0, "batch per rank must be positive, got " << batch);
  if (config_.arch == ArchKind::kLlama) {
    llama_ = std::make_unique<LlamaModel>(config_, batch, device, memory, bf16_activations);
    return;
  }
  const size_t B = batch, T = config_.seq_len, C = config_.n_embd, L = config_.n_layer,
               BT = B * T;
  const ActivationBuffers buf(memory_, config_);  // saved.h: each buffer's Held
  Acts& a = *acts_;
  const LayerSlots slots(config_);  // one per kept layer, one shared by the checkpointed ones
  const LayerSlots op_slots = LayerSlots::for_op_saved(config_);
  const size_t S = slots.count;
  a.slot_of = slots.of;
  a.op_slot_of = op_slots.of;
  auto saved = [&](size_t n) { return SavedPerLayer(memory_, slots, n, bf16_activations); };
  auto unread = [&](size_t n) {  // kept per layer, never read by backward (saved.h)
    return SavedPerLayer(memory_, slots, n, bf16_activations, false);
  };
  auto op_saved = [&](size_t n) {
    return SavedPerLayer(memory_, op_slots, n, bf16_activations);
  };
  a.ends = DecoderEnds(layout_, device_, memory_, batch, bf16_activations);
  a.encoded = buf.stream(BT * C);
  a.ln1 = saved(BT * C);
  a.ln1_mean = buf.f32(S * BT);
  a.ln1_rstd = buf.f32(S * BT);
  a.qkv = op_saved(BT * 3 * C);
  a.atty = op_saved(BT * C);
  a.att_per_layer = attention_saved_floats(config_, B);
  a.att = buf.f32(op_slots.count * a.att_per_layer, buf.attention);
  a.attproj = unread(BT * C);
  a.residual2 = buf.stream(S * BT * C);
  a.ln2 = saved(BT * C);
  a.ln2_mean = buf.f32(S * BT);
  a.ln2_rstd = buf.f32(S * BT);
  a.fch = op_saved(BT * 4 * C);
  a.fch_gelu = saved(BT * 4 * C);
  a.fcproj = unread(BT * C);
  a.residual3 = buf.stream(L * BT * C);
  a.lnf = buf.half(BT * C);  // the head saves autocast's bf16 copy
  a.lnf_mean = buf.f32(BT);
  a.lnf_rstd = buf.f32(BT);
  // Activation gradients (kActivations, as the tracker defines it): live only during backward.
  a.dresidual = buf.stream(BT * C);
  a.dbtc = buf.stream(BT * C);
  a.dqkv = buf.half(BT * 3 * C);
  // softmax-backward scratch, or fused backward's row deltas
  a.datt = buf.f32(a.att_per_layer, buf.attention);
  a.dfch_gelu = buf.half(BT * 4 * C);
  a.dfch = buf.half(BT * 4 * C);
}

GptModel::~GptModel() = default;

float GptModel::forward(const int* tokens, const int* targets, ModelHooks& hooks) {
  if (llama_) return llama_->forward(tokens, targets, hooks);
  Acts& a = *acts_;
  Device& d = device_;
  const int B = batch_, T = config_.seq_len, C = config_.n_embd, L = config_.n_layer,
            BT = B * T;
  // Module indices follow make_layout: 0 embedding, 1+6l.. block l, 1+6L ln_f, 2+6L lm_head.
  a.ends.embed(hooks, tokens, targets, a.encoded.data());
  for (int l = 0; l < L; ++l) block_forward(l, hooks);
  const float* last = a.layer(L - 1, BT, C).residual3;
  run_module(hooks, layout_, 1 + 6 * L, false, [&](Module& m) {
    d.layernorm_forward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), last, m.param(0),
                        m.param(1), BT, C);
  });
  return a.ends.head_forward(hooks, a.lnf.data());
}

// Block l's forward from its input (the residual stream at l). Run once per forward, and again
// in backward for a checkpointed block, through RecomputeHooks. cached (op checkpointing's
// recompute): qkv, attention and fc keep their saved outputs — their modules' hooks fire, their
// kernels do not run, as torch's selective checkpoint serves a saved op from its cache.
void GptModel::block_forward(int l, ModelHooks& hooks, bool cached) {
  Acts& a = *acts_;
  Device& d = device_;
  const int B = batch_, T = config_.seq_len, C = config_.n_embd, BT = B * T;
  const size_t btc = size_t(BT) * C;
  const int m0 = 1 + 6 * l;
  Acts::Layer y = a.layer(l, BT, C);
  auto saved_op = [&](SavedPerLayer& out, auto&& compute) { run_kept_op(d, out, l, cached, compute); };
  run_module(hooks, layout_, m0, false, [&](Module& m) {
    d.layernorm_forward(y.ln1, y.ln1_mean, y.ln1_rstd, y.residual, m.param(0), m.param(1),
                        BT, C);
  });
  a.ln1.store(d, l);
  run_module(hooks, layout_, m0 + 1, false, [&](Module& m) {
    saved_op(a.qkv, [&] { d.linear_forward(y.qkv, y.ln1, m.param(0), m.param(1), BT, C, 3 * C); });
  });
  saved_op(a.atty, [&] { run_attention_forward(d, config_, y.atty, y.att, y.qkv, B); });
  run_module(hooks, layout_, m0 + 2, false, [&](Module& m) {
    d.linear_forward(y.attproj, y.atty, m.param(0), m.param(1), BT, C, C);
  });
  a.attproj.store(d, l);
  residual_add(d, y.residual2, y.residual, y.attproj, btc);
  run_module(hooks, layout_, m0 + 3, false, [&](Module& m) {
    d.layernorm_forward(y.ln2, y.ln2_mean, y.ln2_rstd, y.residual2, m.param(0), m.param(1),
                        BT, C);
  });
  a.ln2.store(d, l);
  run_module(hooks, layout_, m0 + 4, false, [&](Module& m) {
    saved_op(a.fch, [&] { d.linear_forward(y.fch, y.ln2, m.param(0), m.param(1), BT, C, 4 * C); });
  });
  d.gelu_forward(y.fch_gelu, y.fch, 4 * btc);
  a.fch_gelu.store(d, l);
  run_module(hooks, layout_, m0 + 5, false, [&](Module& m) {
    d.linear_forward(y.fcproj, y.fch_gelu, m.param(0), m.param(1), BT, 4 * C, C);
  });
  a.fcproj.store(d, l);
  residual_add(d, y.residual3, y.residual2, y.fcproj, btc);
}

void GptModel::backward(ModelHooks& hooks) {
  if (llama_) return llama_->backward(hooks);
  Acts& a = *acts_;
  Device& d = device_;
  const int B = batch_, T = config_.seq_len, C = config_.n_embd, L = config_.n_layer, BT = B * T;
  const size_t btc = size_t(BT) * C;
  float* dres = a.dresidual.data();  // d loss / d residual stream, accumulated down the layers
  float* dln = a.dbtc.data();        // d of a LayerNorm output (or of atty), consumed at once

  a.ends.head_backward(hooks, a.lnf.data(), dln);
  d.fill_zero(dres, btc * sizeof(float));
  run_module(hooks, layout_, 1 + 6 * L, true, [&](Module& m) {
    d.layernorm_backward(dres, m.grad(0), m.grad(1), dln, a.layer(L - 1, BT, C).residual3,
                         m.param(0), a.lnf_mean.data(), a.lnf_rstd.data(), BT, C);
  });
  for (int l = L - 1; l >= 0; --l) {
    const int m0 = 1 + 6 * l;
    Acts::Layer y = a.layer(l, BT, C);
    recompute_if_checkpointed(config_, l, hooks, [&](ModelHooks& redo) {
      block_forward(l, redo, is_op_checkpointing(config_));
    });
    a.load_layer(d, l);
    // residual3 = residual2 + fcproj: dres is the gradient of both terms.
    run_module(hooks, layout_, m0 + 5, true, [&](Module& m) {
      d.linear_backward(a.dfch_gelu.data(), m.grad(0), m.grad(1), dres, y.fch_gelu, m.param(0),
                        BT, 4 * C, C);
    });
    d.gelu_backward(a.dfch.data(), y.fch, a.dfch_gelu.data(), 4 * btc);
    run_module(hooks, layout_, m0 + 4, true, [&](Module& m) {
      d.linear_backward(dln, m.grad(0), m.grad(1), a.dfch.data(), y.ln2, m.param(0), BT, C,
                        4 * C);
    });
    run_module(hooks, layout_, m0 + 3, true, [&](Module& m) {  // dres += LN2 path: now d residual2
      d.layernorm_backward(dres, m.grad(0), m.grad(1), dln, y.residual2, m.param(0), y.ln2_mean,
                           y.ln2_rstd, BT, C);
    });
    // residual2 = residual + attproj: same split.
    run_module(hooks, layout_, m0 + 2, true, [&](Module& m) {
      d.linear_backward(dln, m.grad(0), m.grad(1), dres, y.atty, m.param(0), BT, C, C);
    });
    run_attention_backward(d, config_, a.dqkv.data(), a.datt.data(), dln, y.qkv, y.atty, y.att,
                           B);
    run_module(hooks, layout_, m0 + 1, true, [&](Module& m) {
      d.linear_backward(dln, m.grad(0), m.grad(1), a.dqkv.data(), y.ln1, m.param(0), BT, C,
                        3 * C);
    });
    run_module(hooks, layout_, m0, true, [&](Module& m) {  // dres += LN1 path: now d residual
      d.layernorm_backward(dres, m.grad(0), m.grad(1), dln, y.residual, m.param(0), y.ln1_mean,
                           y.ln1_rstd, BT, C);
    });
  }
  a.ends.embedding_backward(hooks, dres);
}

double flops_per_step(const GptConfig& c, uint64_t tokens) {
  if (c.arch == ArchKind::kLlama) return llama_flops_per_step(c, tokens);
  const double C = c.n_embd, L = c.n_layer, T = c.seq_len, V = c.vocab;
  const double n_matmul = L * 12.0 * C * C + V * C;  // qkv 3C², proj C², fc 4C², fcproj 4C²
  return 6.0 * n_matmul * double(tokens) + 12.0 * L * C * T * double(tokens);
}

const char* flop_formula() {
  return "6*N_matmul*tokens + 12*L*C*T*tokens, N_matmul = 12*L*C^2 + V*C (per block qkv 3C^2, "
         "proj C^2, fc 4C^2, fcproj 4C^2, plus the LM head V*C even when tied; biases, "
         "LayerNorms and wpe excluded; attention counted over the full TxT, not the causal "
         "half; PaLM appendix B)";
}

const char* flop_formula(const GptConfig& c) {
  return c.arch == ArchKind::kLlama ? llama_flop_formula() : flop_formula();
}

}  // namespace sb
