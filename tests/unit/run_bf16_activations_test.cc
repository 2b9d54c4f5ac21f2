// bf16-mixed's activation storage (gpt.cc's Saved): the tensors autocast produces in bf16 are
// kept in bf16 and the step computes from their rounded values. Checked: fp32 storage is
// bit-identical to the fp32 model (nothing changes for fp32 runs); bf16 storage gives the same
// loss and gradients to bf16's precision (each saved tensor rounded once, ~2^-9 relative); the
// bytes by category equal the closed form and shrink by the bf16 half of 16 of 18 B·T·C terms.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "harness/device/device.h"
#include "harness/model/config.h"
#include "harness/model/data.h"
#include "harness/model/gpt.h"
#include "harness/predict/model_shape.h"
#include "tests/unit/model_test_util.h"

namespace sb::testing {
namespace {

struct Step {
  float loss = 0;
  std::vector<std::vector<float>> grads;
  uint64_t activation_bytes = 0;
};

Step one_step(const GptConfig& c, bool bf16, int steps = 1) {
  auto dev = make_cpu_device();
  MemoryTracker mem(dev->allocator());
  const int B = 2;
  GptModel model(c, B, *dev, mem, bf16);
  FullParams p(model.layout(), mem);
  std::vector<int> tok(B * c.seq_len), tgt(B * c.seq_len);
  Step s;
  for (int i = 0; i < steps; ++i) {
    make_batch(5, i, B, c.seq_len, c.vocab, tok.data(), tgt.data());
    p.zero_grads();
    s.loss = model.forward(tok.data(), tgt.data(), p);
    model.backward(p);
  }
  for (auto& g : p.grads) s.grads.emplace_back(g.data(), g.data() + g.size());
  s.activation_bytes = mem.current(MemCategory::kActivations);
  return s;
}

TEST(ModelBf16Activations, Fp32StorageIsUnchangedAndBf16AgreesToItsPrecision) {
  for (const char* spec : {"tiny", "llama-tiny"})
  for (AttentionKind att : {AttentionKind::kNaive, AttentionKind::kFused}) {
    GptConfig c = parse_model(spec);
    c.attention = att;
    const Step f32 = one_step(c, false), again = one_step(c, false), b16 = one_step(c, true);
    EXPECT_EQ(f32.loss, again.loss);
    EXPECT_NEAR(b16.loss, f32.loss, 1e-2 * std::abs(f32.loss)) << attention_name(att);
    EXPECT_NE(b16.loss, f32.loss) << "bf16 storage must round something";
    for (size_t t = 0; t < f32.grads.size(); ++t) {
      double diff = 0, norm = 0;
      for (size_t i = 0; i < f32.grads[t].size(); ++i) {
        diff += std::pow(double(b16.grads[t][i]) - f32.grads[t][i], 2);
        norm += std::pow(double(f32.grads[t][i]), 2);
      }
      EXPECT_LT(std::sqrt(diff), 0.03 * std::sqrt(norm) + 1e-7)
          << spec << " tensor " << t << " " << attention_name(att);
    }
  }
}

TEST(ModelBf16Activations, BytesEqualTheClosedFormAndHalveTheMatmulTensors) {
  for (const char* spec : {"tiny", "3,48,6,20,97", "llama-tiny", "llama-tiny-pad"}) {
    for (AttentionKind att : {AttentionKind::kNaive, AttentionKind::kFused}) {
      GptConfig c = parse_model(spec);
      c.attention = att;
      const Step f32 = one_step(c, false), b16 = one_step(c, true);
      EXPECT_EQ(f32.activation_bytes, activation_bytes(c, 2, false)) << spec;
      EXPECT_EQ(b16.activation_bytes, activation_bytes(c, 2, true)) << spec;
      // Independent count: L layers of 16·B·T·C floats (the Llama block: B·T·(6C + 3F), its
      // norms' outputs, qkv, attention output, w1|w3 output and SwiGLU output) go from 4 to 2
      // bytes, one layer of them comes back as fp32 work; the loss (--cross-entropy full) adds
      // the head's bf16 logits, 2·B·T·V bytes, beside their fp32 upcast.
      const uint64_t btc16 = c.arch == ArchKind::kLlama
                                 ? 2ull * c.seq_len * (6ull * c.n_embd + 3ull * c.ffn_hidden)
                                 : 16ull * 2 * c.seq_len * c.n_embd;
      const uint64_t bf16_logits = 2ull * 2 * c.seq_len * c.vocab;
      EXPECT_EQ(f32.activation_bytes + bf16_logits - b16.activation_bytes,
                uint64_t(c.n_layer) * btc16 * 2 - btc16 * 4)
          << spec;
    }
  }
}

}  // namespace
}  // namespace sb::testing
