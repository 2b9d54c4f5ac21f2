// Every backward kernel of the CPU device, and the whole model on `tiny`, against central
// finite differences of the fp32 forward. Layer losses are sum(out * R) for a fixed random R
// (so dout = R), accumulated in double. Checked: sampled elements (incl. the largest |grad|)
// and one random +-1 directional derivative covering every element.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "harness/device/device.h"
#include "harness/model/config.h"
#include "harness/model/data.h"
#include "harness/model/gpt.h"
#include "tests/unit/model_test_util.h"

namespace sb::testing {
namespace {

// h: step; a difference passes when |num - ana| <= atol + rtol * max(|num|, |ana|). With fp32
// forwards of O(1) values, h = 1e-2 keeps rounding noise (~1e-6 / h) and truncation (~h^2)
// both near 1e-4 of the gradient scale.
struct Tol {
  float h = 1e-2f;
  double atol = 2e-4;
  double rtol = 3e-3;
};

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * double(b[i]);
  return s;
}

std::vector<float> uniform(size_t n, float lo, float hi, uint64_t seed) {
  std::vector<float> v(n);
  fill_uniform(v.data(), n, lo, hi, seed);
  return v;
}

void check_grad(const std::string& what, float* x, size_t n, const float* analytic,
                const std::function<double()>& loss, Tol tol = {}, int samples = 12) {
  auto near = [&](double num, double ana, long element) {  // element -1: the direction
    const double bound = tol.atol + tol.rtol * std::max(std::abs(num), std::abs(ana));
    EXPECT_LE(std::abs(num - ana), bound)
        << what << (element < 0 ? " along a random direction" : " element ")
        << (element < 0 ? "" : std::to_string(element)) << ": numeric " << num << " analytic "
        << ana;
  };
  std::vector<size_t> idx;
  for (int k = 0; k < samples; ++k) idx.push_back((size_t(k) * 7919 + 13) % n);
  idx.push_back(size_t(std::max_element(analytic, analytic + n,
                                        [](float a, float b) {
                                          return std::abs(a) < std::abs(b);
                                        }) -
                       analytic));
  for (size_t i : idx) {
    const float saved = x[i];
    const float up = saved + tol.h, down = saved - tol.h;
    x[i] = up;
    const double lp = loss();
    x[i] = down;
    const double lm = loss();
    x[i] = saved;
    near((lp - lm) / (double(up) - double(down)), analytic[i], long(i));
  }
  // Directional derivative along random signs: every element's gradient takes part.
  std::vector<float> x0(x, x + n), dir = uniform(n, -1.0f, 1.0f, 77);
  double ana = 0.0;
  for (size_t i = 0; i < n; ++i) {
    dir[i] = dir[i] < 0 ? -1.0f : 1.0f;
    ana += double(analytic[i]) * dir[i];
  }
  for (size_t i = 0; i < n; ++i) x[i] = x0[i] + tol.h * dir[i];
  const double lp = loss();
  for (size_t i = 0; i < n; ++i) x[i] = x0[i] - tol.h * dir[i];
  const double lm = loss();
  std::copy(x0.begin(), x0.end(), x);
  near((lp - lm) / (2.0 * tol.h), ana, -1);
}

// Undo a "+=" contract: the buffer was seeded with `seed` before the kernel accumulated.
std::vector<float> minus(std::vector<float> v, float seed) {
  for (float& f : v) f -= seed;
  return v;
}

TEST(ModelGradCheck, Linear) {
  auto dev = make_cpu_device();
  const int rows = 9, in = 13, out = 7;
  auto x = uniform(rows * in, -1, 1, 1), w = uniform(out * in, -1, 1, 2),
       b = uniform(out, -1, 1, 3), r = uniform(rows * out, -1, 1, 4);
  std::vector<float> y(rows * out);
  auto loss = [&] {
    dev->linear_forward(y.data(), x.data(), w.data(), b.data(), rows, in, out);
    return dot(y, r);
  };
  std::vector<float> dx(rows * in, 9.0f), dw(out * in, 0.5f), db(out, 0.25f);
  dev->linear_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), rows, in,
                       out);
  check_grad("linear dx", x.data(), x.size(), dx.data(), loss);
  check_grad("linear dw", w.data(), w.size(), minus(dw, 0.5f).data(), loss);
  check_grad("linear db", b.data(), b.size(), minus(db, 0.25f).data(), loss);
}

TEST(ModelGradCheck, LayerNorm) {
  auto dev = make_cpu_device();
  const int rows = 5, C = 37;  // C > 16 and not a multiple: lane and tail paths
  auto x = uniform(rows * C, -2, 2, 5), w = uniform(C, 0.5, 1.5, 6), b = uniform(C, -1, 1, 7),
       r = uniform(rows * C, -1, 1, 8);
  std::vector<float> y(rows * C), mean(rows), rstd(rows);
  auto loss = [&] {
    dev->layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                           rows, C);
    return dot(y, r);
  };
  loss();
  std::vector<float> dx(rows * C, 1.0f), dw(C, 0.5f), db(C, 0.25f);
  dev->layernorm_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), rows, C);
  check_grad("layernorm dx", x.data(), x.size(), minus(dx, 1.0f).data(), loss);
  check_grad("layernorm dw", w.data(), w.size(), minus(dw, 0.5f).data(), loss);
  check_grad("layernorm db", b.data(), b.size(), minus(db, 0.25f).data(), loss);
}

TEST(ModelGradCheck, Gelu) {
  auto dev = make_cpu_device();
  const size_t n = 83;
  auto x = uniform(n, -5, 5, 9), r = uniform(n, -1, 1, 10);
  std::vector<float> y(n), dx(n, 7.0f);
  auto loss = [&] {
    dev->gelu_forward(y.data(), x.data(), n);
    return dot(y, r);
  };
  dev->gelu_backward(dx.data(), x.data(), r.data(), n);
  check_grad("gelu dx", x.data(), n, dx.data(), loss, Tol{}, 40);
  // GPT-2's tanh GELU at known points (PyTorch gelu(approximate='tanh')).
  const float pts[3] = {-1.0f, 0.5f, 3.0f}, want[3] = {-0.158808f, 0.345714f, 2.9963626f};
  float got[3];
  dev->gelu_forward(got, pts, 3);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], want[i], 1e-5f) << pts[i];
}

TEST(ModelGradCheck, CausalAttention) {
  auto dev = make_cpu_device();
  const int B = 2, T = 19, C = 12, NH = 3;  // rows up to 19 long: lane and tail paths
  auto qkv = uniform(size_t(B) * T * 3 * C, -1, 1, 11), r = uniform(size_t(B) * T * C, -1, 1, 12);
  std::vector<float> y(B * T * C), att(B * NH * T * T), datt(att.size());
  auto loss = [&] {
    dev->attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(y, r);
  };
  loss();
  for (int bh = 0; bh < B * NH; ++bh) {
    for (int t = 0; t < T; ++t) {
      double s = 0.0;
      for (int j = 0; j < T; ++j) {
        const float p = att[(size_t(bh) * T + t) * T + j];
        if (j > t) {
          EXPECT_EQ(p, 0.0f) << "causal mask at t=" << t << " j=" << j;
        }
        s += p;
      }
      EXPECT_NEAR(s, 1.0, 1e-5);
    }
  }
  std::vector<float> dqkv(qkv.size(), 3.0f);  // "=" contract: the seed must be overwritten
  dev->attention_backward(dqkv.data(), datt.data(), r.data(), qkv.data(), att.data(), B, T, C,
                          NH);
  check_grad("attention dqkv", qkv.data(), qkv.size(), dqkv.data(), loss, Tol{3e-3f, 3e-4, 3e-3},
             40);
}

// FlashAttention (fused) at T = 70: two query and key tiles of the CPU device's 64, so the
// online softmax's rescale across tiles and the diagonal tile's mask both run.
TEST(ModelGradCheck, FusedAttention) {
  auto dev = make_cpu_device();
  const int B = 2, T = 70, C = 12, NH = 3;
  auto qkv = uniform(size_t(B) * T * 3 * C, -1, 1, 21), r = uniform(size_t(B) * T * C, -1, 1, 22);
  std::vector<float> y(B * T * C), lse(B * NH * T), delta(lse.size());
  auto loss = [&] {
    dev->flash_attention_forward(y.data(), lse.data(), qkv.data(), B, T, C, NH);
    return dot(y, r);
  };
  loss();
  std::vector<float> dqkv(qkv.size(), 3.0f);  // "=" contract: the seed must be overwritten
  dev->flash_attention_backward(dqkv.data(), delta.data(), r.data(), qkv.data(), y.data(),
                                lse.data(), B, T, C, NH);
  check_grad("fused attention dqkv", qkv.data(), qkv.size(), dqkv.data(), loss,
             Tol{3e-3f, 3e-4, 3e-3}, 40);
}

// Fused against naive on the same inputs: outputs, each row's log-sum-exp against the naive
// probabilities (p_tj = exp(s_tj - lse_t) for the scaled score s), and the input gradients.
// Large scores (qkv in +-4) make the running maximum move between tiles.
TEST(ModelGradCheck, FusedAttentionMatchesNaive) {
  auto dev = make_cpu_device();
  for (int T : {1, 63, 64, 65, 130}) {
    const int B = 2, C = 16, NH = 2, hs = C / NH;
    auto qkv = uniform(size_t(B) * T * 3 * C, -4, 4, 31 + T);
    auto g = uniform(size_t(B) * T * C, -1, 1, 32 + T);
    std::vector<float> yn(B * T * C), yf(yn.size()), att(size_t(B) * NH * T * T),
        datt(att.size()), lse(B * NH * T), delta(lse.size());
    std::vector<float> dn(qkv.size()), df(qkv.size(), 5.0f);
    dev->attention_forward(yn.data(), att.data(), qkv.data(), B, T, C, NH);
    dev->attention_backward(dn.data(), datt.data(), g.data(), qkv.data(), att.data(), B, T, C,
                            NH);
    dev->flash_attention_forward(yf.data(), lse.data(), qkv.data(), B, T, C, NH);
    dev->flash_attention_backward(df.data(), delta.data(), g.data(), qkv.data(), yf.data(),
                                  lse.data(), B, T, C, NH);
    for (size_t i = 0; i < yn.size(); ++i)
      ASSERT_NEAR(yf[i], yn[i], 2e-5f + 2e-5f * std::abs(yn[i])) << "out T=" << T << " @" << i;
    for (size_t i = 0; i < dn.size(); ++i)
      ASSERT_NEAR(df[i], dn[i], 1e-4f + 1e-4f * std::abs(dn[i])) << "dqkv T=" << T << " @" << i;
    const float scale = 1.0f / std::sqrt(float(hs));
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        for (int t = 0; t < T; ++t) {  // p_t0 = exp(s_t0 - lse_t) from q_t . k_0
          const float* q = qkv.data() + (size_t(b) * T + t) * 3 * C + h * hs;
          const float* k = qkv.data() + size_t(b) * T * 3 * C + C + h * hs;
          double s = 0.0;
          for (int d = 0; d < hs; ++d) s += double(q[d]) * k[d];
          const double p = std::exp(s * scale - lse[(size_t(b) * NH + h) * T + t]);
          ASSERT_NEAR(p, att[((size_t(b) * NH + h) * T + t) * T], 1e-5) << "lse row " << t;
        }
      }
    }
  }
}

TEST(ModelGradCheck, SoftmaxCrossEntropy) {
  auto dev = make_cpu_device();
  const int rows = 4, V = 37;
  auto logits = uniform(rows * V, -3, 3, 13);
  std::vector<int> targets = {0, 36, 5, 5};
  std::vector<float> probs(rows * V), dlogits(rows * V);
  auto loss = [&] {
    return double(dev->softmax_crossentropy_forward(probs.data(), logits.data(),
                                                    targets.data(), rows, V));
  };
  const double l0 = loss();
  double want = 0.0;  // reference: mean of logsumexp - logit[target], in double
  for (int r = 0; r < rows; ++r) {
    double s = 0.0;
    for (int j = 0; j < V; ++j) s += std::exp(double(logits[r * V + j]));
    want += (std::log(s) - logits[r * V + targets[r]]) / rows;
  }
  EXPECT_NEAR(l0, want, 1e-5);
  dev->crossentropy_backward(dlogits.data(), probs.data(), targets.data(), rows, V,
                             1.0f / rows);
  check_grad("softmax-crossentropy dlogits", logits.data(), logits.size(), dlogits.data(), loss,
             Tol{1e-2f, 2e-5, 3e-3}, 40);
}

TEST(ModelGradCheck, Embedding) {
  auto dev = make_cpu_device();
  const int B = 2, T = 5, C = 6, V = 4;
  std::vector<int> tokens = {0, 1, 1, 3, 0, 2, 2, 2, 1, 0};  // repeats: accumulation
  auto wte = uniform(V * C, -1, 1, 14), wpe = uniform(T * C, -1, 1, 15),
       r = uniform(B * T * C, -1, 1, 16);
  std::vector<float> y(B * T * C), dwte(V * C, 0.5f), dwpe(T * C, 0.25f);
  auto loss = [&] {
    dev->embedding_forward(y.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(y, r);
  };
  dev->embedding_backward(dwte.data(), dwpe.data(), r.data(), tokens.data(), B, T, C);
  check_grad("embedding dwte", wte.data(), wte.size(), minus(dwte, 0.5f).data(), loss);
  check_grad("embedding dwpe", wpe.data(), wpe.size(), minus(dwpe, 0.25f).data(), loss);
}

// The whole model on `tiny` (tied and untied head): every tensor's gradient, through the
// hooks, against differences of the mean loss. The loss comes back as an fp32 of ~4 (one ulp
// is 5e-7), so signals are made large: parameters at a random "trained-looking" point (every
// path contributes), per-element steps on the largest-gradient elements, and the derivative
// along the gradient's own direction (step 0.02 of a unit vector: at 0.05 the Llama block's
// curvature alone moves it by 2 %), which must equal |g|.
void check_model(bool tied, AttentionKind attention = AttentionKind::kFused,
                 const char* preset = "tiny") {
  GptConfig c = parse_model(preset);
  c.tied_head = tied && c.arch == ArchKind::kGpt2;  // the Llama block is always untied
  c.attention = attention;
  auto dev = make_cpu_device();
  MemoryTracker mem(dev->allocator());
  const int B = 2;
  GptModel model(c, B, *dev, mem);
  const ModelLayout& layout = model.layout();
  FullParams p(layout, mem);
  for (int t = 0; t < int(p.params.size()); ++t) {
    const ParamTensor& pt = layout.tensors[t];
    const float fan_in = pt.shape.size() == 2 ? float(pt.shape[1]) : 1.0f;
    if (pt.init == InitKind::kOnes)
      fill_uniform(p.params[t].data(), pt.numel, 0.5f, 1.5f, 100 + t);
    else if (pt.shape.size() == 2)  // matrices (and embeddings) at ~1/sqrt(fan_in)
      fill_uniform(p.params[t].data(), pt.numel, -1.5f / std::sqrt(fan_in),
                   1.5f / std::sqrt(fan_in), 100 + t);
    else
      fill_uniform(p.params[t].data(), pt.numel, -0.3f, 0.3f, 100 + t);
  }
  std::vector<int> tok(B * c.seq_len), tgt(B * c.seq_len);
  make_batch(3, 0, B, c.seq_len, c.vocab, tok.data(), tgt.data());
  p.zero_grads();
  model.forward(tok.data(), tgt.data(), p);
  model.backward(p);
  auto loss = [&] { return double(model.forward(tok.data(), tgt.data(), p)); };
  for (int t = 0; t < int(p.params.size()); ++t) {
    const std::string what = "model " + layout.tensors[t].name;
    float* x = p.params[t].data();
    const size_t n = p.grads[t].size();
    std::vector<float> g(p.grads[t].data(), p.grads[t].data() + n);
    double norm = 0.0;
    for (float v : g) norm += double(v) * v;
    norm = std::sqrt(norm);
    ASSERT_GT(norm, 1e-4) << what << ": gradient vanishes, the check would be vacuous";
    // Elements: the 4 largest |g| (signal ~1e-2 against noise ~5e-5 at h = 1e-2).
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    const size_t k = std::min<size_t>(4, n);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](size_t a, size_t b) { return std::abs(g[a]) > std::abs(g[b]); });
    for (size_t j = 0; j < k; ++j) {
      const size_t i = order[j];
      const float saved = x[i], up = saved + 1e-2f, down = saved - 1e-2f;
      x[i] = up;
      const double lp = loss();
      x[i] = down;
      const double lm = loss();
      x[i] = saved;
      const double num = (lp - lm) / (double(up) - double(down));
      EXPECT_NEAR(num, g[i], 1e-4 + 1e-2 * std::abs(g[i])) << what << "[" << i << "]";
    }
    // Along g/|g|: d loss = |g| * eps; a wrong component along g shows here.
    const double eps = 0.02;
    std::vector<float> x0(x, x + n);
    for (size_t i = 0; i < n; ++i) x[i] = float(x0[i] + eps * g[i] / norm);
    const double lp = loss();
    for (size_t i = 0; i < n; ++i) x[i] = float(x0[i] - eps * g[i] / norm);
    const double lm = loss();
    std::copy(x0.begin(), x0.end(), x);
    EXPECT_NEAR((lp - lm) / (2 * eps), norm, 2e-5 + 1.5e-2 * norm) << what << " along g";
  }
}

TEST(ModelGradCheck, WholeTinyModelTiedHead) { check_model(true); }
TEST(ModelGradCheck, WholeTinyModelUntiedHead) { check_model(false); }
TEST(ModelGradCheck, WholeTinyModelNaiveAttention) { check_model(true, AttentionKind::kNaive); }
TEST(ModelGradCheck, WholeLlamaTinyModel) {
  check_model(false, AttentionKind::kFused, "llama-tiny");
}
TEST(ModelGradCheck, WholeLlamaTinyModelNaiveAttention) {
  check_model(false, AttentionKind::kNaive, "llama-tiny");
}

// ---- the Llama block's kernels ----------------------------------------------------------------

TEST(ModelGradCheck, RmsNorm) {
  auto dev = make_cpu_device();
  const int rows = 5, C = 37;
  auto x = uniform(rows * C, -2, 2, 21), w = uniform(C, 0.5, 1.5, 22),
       r = uniform(rows * C, -1, 1, 23);
  std::vector<float> y(rows * C), rstd(rows);
  auto loss = [&] {
    dev->rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), rows, C);
    return dot(y, r);
  };
  loss();
  std::vector<float> dx(rows * C, 1.0f), dw(C, 0.5f);
  dev->rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), rows,
                        C);
  check_grad("rmsnorm dx", x.data(), x.size(), minus(dx, 1.0f).data(), loss);
  check_grad("rmsnorm dw", w.data(), w.size(), minus(dw, 0.5f).data(), loss);
}

TEST(ModelGradCheck, SwiGlu) {
  auto dev = make_cpu_device();
  const int rows = 3, F = 29;
  auto h = uniform(rows * 2 * F, -4, 4, 24), r = uniform(rows * F, -1, 1, 25);
  std::vector<float> y(rows * F), dh(rows * 2 * F, 7.0f);
  auto loss = [&] {
    dev->swiglu_forward(y.data(), h.data(), rows, F);
    return dot(y, r);
  };
  dev->swiglu_backward(dh.data(), h.data(), r.data(), rows, F);
  check_grad("swiglu dh", h.data(), h.size(), dh.data(), loss, Tol{}, 40);
}

// RoPE with GQA sharing: 6 query heads on 2 K/V heads (groups of 3), positions up to 6.
TEST(ModelGradCheck, RopeGqa) {
  auto dev = make_cpu_device();
  const int B = 2, T = 7, H = 6, KV = 2, hd = 4, C = H * hd, in_w = (H + 2 * KV) * hd;
  auto raw = uniform(B * T * in_w, -1, 1, 26), r = uniform(B * T * 3 * C, -1, 1, 27);
  std::vector<float> y(B * T * 3 * C), draw(B * T * in_w, 5.0f);
  auto loss = [&] {
    dev->rope_gqa_forward(y.data(), raw.data(), B, T, H, KV, hd, 10000.0f);
    return dot(y, r);
  };
  dev->rope_gqa_backward(draw.data(), r.data(), B, T, H, KV, hd, 10000.0f);
  check_grad("rope_gqa dqkv_raw", raw.data(), raw.size(), draw.data(), loss, Tol{}, 40);
}

}  // namespace
}  // namespace sb::testing
