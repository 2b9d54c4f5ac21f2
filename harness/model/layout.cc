// GPT-2 parameterisation (Radford et al. 2019; nanoGPT's init): N(0, 0.02) weights, residual
// projections scaled by 1/sqrt(2L), zero biases, unit LayerNorm gains.
#include "harness/model/layout.h"

#include "harness/common/hash.h"
#include "harness/model/layout_builder.h"
#include "harness/model/llama_layout.h"

#include <algorithm>
#include <cmath>

namespace sb {
namespace {

// Standard normal from a counter (Box-Muller on two hashed uniforms).
float normal_at(uint64_t seed, uint64_t tensor, uint64_t i) {
  uint64_t h1 = splitmix64(seed * 0x100000001b3ull ^ splitmix64(tensor * 0x9e37ull + (i << 1)));
  uint64_t h2 = splitmix64(h1 ^ 0x5851f42d4c957f2dull);
  double u1 = (double(h1 >> 11) + 1.0) * (1.0 / 9007199254740993.0);
  double u2 = double(h2 >> 11) * (1.0 / 9007199254740992.0);
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace

uint64_t ModelLayout::num_params() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += t.numel;
  return n;
}

std::vector<int> ModelLayout::grad_ready_module() const {
  std::vector<int> ready(tensors.size(), int(modules.size()));
  for (int m = 0; m < int(modules.size()); ++m)
    for (int t : modules[m].tensors) ready[t] = std::min(ready[t], m);
  return ready;
}

std::vector<int> ModelLayout::uses_per_pass() const {
  std::vector<int> uses(tensors.size(), 0);
  for (const auto& m : modules)
    for (int t : m.tensors) ++uses[t];
  return uses;
}

ModelLayout make_layout(const GptConfig& c) {
  if (c.arch == ArchKind::kLlama) return make_llama_layout(c);
  LayoutBuilder layout(c);
  const int C = c.n_embd, V = c.vocab, T = c.positions(), L = c.n_layer;
  int wte = layout.tensor("wte.weight", {V, C}, 0, true, InitKind::kNormal);
  int wpe = layout.tensor("wpe.weight", {T, C}, 0, true, InitKind::kNormal);
  layout.module("embedding", ModuleKind::kEmbedding, 0, {wte, wpe});
  for (int b = 0; b < L; ++b) {
    const int s = b + 1;
    const std::string p = "h." + std::to_string(b) + ".";
    int ln1w = layout.tensor(p + "ln_1.weight", {C}, s, false, InitKind::kOnes);
    int ln1b = layout.tensor(p + "ln_1.bias", {C}, s, false, InitKind::kZeros);
    int qkvw = layout.tensor(p + "attn.qkv.weight", {3 * C, C}, s, true, InitKind::kNormal);
    int qkvb = layout.tensor(p + "attn.qkv.bias", {3 * C}, s, false, InitKind::kZeros);
    int prw = layout.tensor(p + "attn.proj.weight", {C, C}, s, true, InitKind::kNormalResidual);
    int prb = layout.tensor(p + "attn.proj.bias", {C}, s, false, InitKind::kZeros);
    int ln2w = layout.tensor(p + "ln_2.weight", {C}, s, false, InitKind::kOnes);
    int ln2b = layout.tensor(p + "ln_2.bias", {C}, s, false, InitKind::kZeros);
    int fcw = layout.tensor(p + "mlp.fc.weight", {4 * C, C}, s, true, InitKind::kNormal);
    int fcb = layout.tensor(p + "mlp.fc.bias", {4 * C}, s, false, InitKind::kZeros);
    int fpw = layout.tensor(p + "mlp.proj.weight", {C, 4 * C}, s, true, InitKind::kNormalResidual);
    int fpb = layout.tensor(p + "mlp.proj.bias", {C}, s, false, InitKind::kZeros);
    layout.module(p + "ln_1", ModuleKind::kLayerNorm, s, {ln1w, ln1b});
    layout.module(p + "attn.qkv", ModuleKind::kLinear, s, {qkvw, qkvb});
    layout.module(p + "attn.proj", ModuleKind::kLinear, s, {prw, prb});
    layout.module(p + "ln_2", ModuleKind::kLayerNorm, s, {ln2w, ln2b});
    layout.module(p + "mlp.fc", ModuleKind::kLinear, s, {fcw, fcb});
    layout.module(p + "mlp.proj", ModuleKind::kLinear, s, {fpw, fpb});
  }
  const int h = L + 1;
  int lnfw = layout.tensor("ln_f.weight", {C}, h, false, InitKind::kOnes);
  int lnfb = layout.tensor("ln_f.bias", {C}, h, false, InitKind::kZeros);
  layout.module("ln_f", ModuleKind::kLayerNorm, h, {lnfw, lnfb});
  int head =
      c.tied_head ? wte : layout.tensor("lm_head.weight", {V, C}, h, true, InitKind::kNormal);
  layout.module("lm_head", ModuleKind::kLmHead, h, {head});
  return layout.take();
}

void init_tensor_range(const ModelLayout& layout, int t, uint64_t begin, uint64_t count,
                       uint64_t seed, float* out) {
  const ParamTensor& p = layout.tensors[t];
  const float residual = 0.02f / std::sqrt(2.0f * float(layout.config.n_layer));
  for (uint64_t i = 0; i < count; ++i) {
    switch (p.init) {
      case InitKind::kNormal: out[i] = 0.02f * normal_at(seed, uint64_t(t), begin + i); break;
      case InitKind::kNormalResidual:
        out[i] = residual * normal_at(seed, uint64_t(t), begin + i);
        break;
      case InitKind::kZeros: out[i] = 0.0f; break;
      case InitKind::kOnes: out[i] = 1.0f; break;
    }
  }
}

}  // namespace sb
