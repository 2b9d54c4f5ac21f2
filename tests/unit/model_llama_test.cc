// The Llama block: presets against the published parameter counts, the FLOP formula with
// grouped-query K/V counted, the CPU kernels against direct references (RoPE as Meta's complex
// rotation, RMSNorm and SwiGLU in double, GQA's sharing), and a tiny model that learns.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <vector>

#include "harness/model/config.h"
#include "harness/model/data.h"
#include "harness/model/gpt.h"
#include "harness/model/llama_layout.h"
#include "tests/unit/model_test_util.h"

namespace sb::testing {
namespace {

std::vector<float> uniform(size_t n, float lo, float hi, uint64_t seed) {
  std::vector<float> v(n);
  fill_uniform(v.data(), n, lo, hi, seed);
  return v;
}

// Meta's llama/model.py parameter counts as the Llama 2 and Llama 3 releases state them
// (7B: 6,738,415,616; 13B: 13,015,864,320; 70B: 68,976,648,192; Llama 3 8B: 8,030,261,248).
TEST(LlamaLayout, PresetsHaveThePublishedParameterCounts) {
  const std::pair<const char*, uint64_t> published[] = {{"llama2-7b", 6738415616ull},
                                                        {"llama2-13b", 13015864320ull},
                                                        {"llama2-70b", 68976648192ull},
                                                        {"llama3-8b", 8030261248ull}};
  for (const auto& [name, count] : published) {
    const GptConfig c = parse_model(name);
    EXPECT_EQ(c.arch, ArchKind::kLlama) << name;
    EXPECT_EQ(count_params(c), count) << name;
    EXPECT_EQ(make_layout(c).num_params(), count) << name;
  }
  EXPECT_EQ(parse_model("llama2-70b").kv_heads(), 8);
  EXPECT_EQ(parse_model("llama3-8b").rope_theta, 500000.0f);
  EXPECT_EQ(llama_ffn_rule(4096), 11008);  // Meta's rule gives the 7B width
}

// (Every Llama size is even: C = H·hd with an even head dim. World 3 is where it pads.)
TEST(LlamaLayout, PadPresetDividesNotByThree) {
  const ModelLayout l = make_layout(parse_model("llama-tiny-pad"));
  EXPECT_NE(l.num_params() % 3, 0u);
  std::vector<uint64_t> per_segment(l.num_segments, 0);
  for (const ParamTensor& t : l.tensors) {
    per_segment[t.segment] += t.numel;
    EXPECT_NE(t.numel % 3, 0u) << t.name;
  }
  for (uint64_t n : per_segment) EXPECT_NE(n % 3, 0u) << n;
}

TEST(LlamaLayout, ArchFlagAndPresetsAgree) {
  EXPECT_EQ(parse_model("2,32,4,16,64", "llama").arch, ArchKind::kLlama);
  EXPECT_EQ(parse_model("2,32,4,16,64", "llama").ffn_hidden, 256);  // 256·ceil(85/256)
  EXPECT_FALSE(parse_model("2,32,4,16,64", "llama").tied_head);
  EXPECT_EQ(parse_model("2,32,4,16,64", "gpt2").arch, ArchKind::kGpt2);
  EXPECT_THROW(parse_model("llama2-7b", "gpt2"), std::invalid_argument);
  EXPECT_THROW(parse_model("tiny", "llama"), std::invalid_argument);
  EXPECT_THROW(parse_model("tiny", "bert"), std::invalid_argument);
  EXPECT_THROW(parse_model("2,30,4,16,64", "llama"), std::invalid_argument);  // C % H
  EXPECT_THROW(parse_model("2,36,4,16,64", "llama"), std::invalid_argument);  // odd head dim
}

// N_matmul from the published count: everything but the embedding lookup and the norm gains.
TEST(LlamaLayout, FlopsCountGqaProjectionsAsThePublishedCountImplies) {
  for (const char* name : {"llama2-7b", "llama2-70b", "llama3-8b"}) {
    const GptConfig c = parse_model(name);
    const double L = c.n_layer, C = c.n_embd, T = c.seq_len;
    const double n_matmul = double(count_params(c)) - double(c.vocab) * C - (2 * L + 1) * C;
    const uint64_t tokens = 2 * c.seq_len;
    EXPECT_DOUBLE_EQ(flops_per_step(c, tokens), 6 * n_matmul * tokens + 12 * L * C * T * tokens)
        << name;
  }
  EXPECT_NE(std::string(flop_formula(parse_model("llama-tiny"))).find("KV"), std::string::npos);
}

// Meta's apply_rotary_emb: pairs as complex numbers times polar(1, t·theta^(-2i/hd)); K/V head
// h / (H/KV) for query head h (repeat_kv).
TEST(LlamaKernels, RopeGqaMatchesComplexRotationAndRepeatKv) {
  auto dev = make_cpu_device();
  const int B = 2, T = 9, H = 4, KV = 2, hd = 6, C = H * hd, in_w = (H + 2 * KV) * hd;
  const float theta = 500000.0f;
  auto raw = uniform(B * T * in_w, -1, 1, 31);
  std::vector<float> out(B * T * 3 * C);
  dev->rope_gqa_forward(out.data(), raw.data(), B, T, H, KV, hd, theta);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const float* in = raw.data() + (size_t(b) * T + t) * in_w;
      const float* o = out.data() + (size_t(b) * T + t) * 3 * C;
      for (int h = 0; h < H; ++h) {
        const int kvh = h / (H / KV);
        for (int i = 0; i < hd / 2; ++i) {
          const auto rot = std::polar(1.0, t * std::pow(double(theta), -2.0 * i / hd));
          const auto q = std::complex<double>(in[h * hd + 2 * i], in[h * hd + 2 * i + 1]) * rot;
          const auto k = std::complex<double>(in[C + kvh * hd + 2 * i],
                                              in[C + kvh * hd + 2 * i + 1]) * rot;
          EXPECT_NEAR(o[h * hd + 2 * i], q.real(), 1e-5);
          EXPECT_NEAR(o[h * hd + 2 * i + 1], q.imag(), 1e-5);
          EXPECT_NEAR(o[C + h * hd + 2 * i], k.real(), 1e-5);
          EXPECT_NEAR(o[C + h * hd + 2 * i + 1], k.imag(), 1e-5);
          EXPECT_EQ(o[2 * C + h * hd + 2 * i], in[C + (KV + kvh) * hd + 2 * i]);
        }
      }
    }
}

// The property RoPE exists for: a rotated q·k depends on positions only through t - s.
TEST(LlamaKernels, RopeScoresDependOnRelativePositionOnly) {
  auto dev = make_cpu_device();
  const int T = 12, H = 1, KV = 1, hd = 8, in_w = 3 * hd;
  std::vector<float> raw(T * in_w);
  auto q = uniform(hd, -1, 1, 41), k = uniform(hd, -1, 1, 42);
  for (int t = 0; t < T; ++t) {  // the same q and k at every position
    std::copy(q.begin(), q.end(), raw.begin() + t * in_w);
    std::copy(k.begin(), k.end(), raw.begin() + t * in_w + hd);
  }
  std::vector<float> out(T * 3 * hd);
  dev->rope_gqa_forward(out.data(), raw.data(), 1, T, H, KV, hd, 10000.0f);
  auto score = [&](int t, int s) {
    double d = 0;
    for (int i = 0; i < hd; ++i) d += double(out[t * 3 * hd + i]) * out[s * 3 * hd + hd + i];
    return d;
  };
  EXPECT_NEAR(score(5, 2), score(11, 8), 1e-5);
  EXPECT_NEAR(score(3, 3), score(9, 9), 1e-5);
  EXPECT_GT(std::abs(score(5, 2) - score(5, 4)), 1e-4);  // and does depend on t - s
}

TEST(LlamaKernels, RmsNormAndSwiGluMatchDoubleReferences) {
  auto dev = make_cpu_device();
  const int rows = 3, C = 19, F = 11;
  auto x = uniform(rows * C, -2, 2, 51), w = uniform(C, 0.5, 1.5, 52);
  std::vector<float> y(rows * C), rstd(rows);
  dev->rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), rows, C);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < C; ++i) ss += double(x[r * C + i]) * x[r * C + i];
    const double s = 1.0 / std::sqrt(ss / C + 1e-5);
    for (int i = 0; i < C; ++i) EXPECT_NEAR(y[r * C + i], x[r * C + i] * s * w[i], 1e-5);
  }
  auto h = uniform(rows * 2 * F, -4, 4, 53);
  std::vector<float> g(rows * F);
  dev->swiglu_forward(g.data(), h.data(), rows, F);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < F; ++i) {
      const double a = h[r * 2 * F + i], u = h[r * 2 * F + F + i];
      EXPECT_NEAR(g[r * F + i], a / (1 + std::exp(-a)) * u, 1e-5);
    }
}

// A few AdamW-free SGD steps on one batch: the Llama block learns (loss falls) with both
// attentions, and the two attentions give the same loss.
TEST(LlamaModel, TinyModelLearnsAndAttentionsAgree) {
  std::vector<float> first;
  for (AttentionKind att : {AttentionKind::kFused, AttentionKind::kNaive}) {
    GptConfig c = parse_model("llama-tiny");
    c.attention = att;
    auto dev = make_cpu_device();
    MemoryTracker mem(dev->allocator());
    GptModel model(c, 2, *dev, mem);
    FullParams p(model.layout(), mem);
    std::vector<int> tok(2 * c.seq_len), tgt(2 * c.seq_len);
    make_batch(7, 0, 2, c.seq_len, c.vocab, tok.data(), tgt.data());
    std::vector<float> losses;
    for (int step = 0; step < 5; ++step) {
      p.zero_grads();
      losses.push_back(model.forward(tok.data(), tgt.data(), p));
      model.backward(p);
      for (size_t t = 0; t < p.params.size(); ++t)
        for (size_t i = 0; i < p.params[t].size(); ++i) p.params[t][i] -= 0.5f * p.grads[t][i];
    }
    EXPECT_NEAR(losses[0], std::log(64.0f), 0.1f);  // ~uniform over the vocab at init
    EXPECT_LT(losses.back(), losses[0] - 0.05f);
    if (first.empty()) first = losses;
    else
      for (size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(losses[i], first[i], 1e-4) << i;
  }
}

}  // namespace
}  // namespace sb::testing
