// The host kernels. Matmuls (linear layers, attention scores and values, their backward) go to
// cblas_sgemm with rows = B*T so BLAS sees big matrices; the rest are single passes written so
// that -O3 -march=native vectorises them (lane-split reductions, a branch-free exp). No
// threading here: one rank is one core.
#include "harness/device/cpu_device.h"

#include <unistd.h>

#include <cstdlib>

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "harness/common/check.h"
#include "harness/common/dtype.h"
#include "harness/device/cpu_math.h"

namespace sb {
namespace {

constexpr float kLnEps = 1e-5f;  // GPT-2 / PyTorch LayerNorm default

// tanh(u) = 1 - 2 / (e^{2u} + 1): saturates cleanly at ±1 because fast_exp clamps.
inline float fast_tanh(float u) { return 1.0f - 2.0f / (fast_exp(2.0f * u) + 1.0f); }

// Sum / max of f(0..n-1) in 16 independent lanes: without -ffast-math the compiler may not
// reorder a float reduction, but it does vectorise these fixed-width inner loops.
constexpr int kLanes = 16;
template <class F>
inline float lane_sum(int n, F f) {
  float acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += f(i + j);
  float s = 0.0f;
  for (; i < n; ++i) s += f(i);
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}
inline float lane_max(int n, const float* x) {
  float acc[kLanes];
  std::fill(acc, acc + kLanes, -INFINITY);
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] = std::max(acc[j], x[i + j]);
  float m = -INFINITY;
  for (; i < n; ++i) m = std::max(m, x[i]);
  for (int j = 0; j < kLanes; ++j) m = std::max(m, acc[j]);
  return m;
}

// In place: row[0..n) = softmax(row[0..n)), row[n..T) = 0 (the causal mask).
inline void masked_softmax_row(float* row, int n, int T) {
  const float mx = lane_max(n, row);
  for (int j = 0; j < n; ++j) row[j] = fast_exp(row[j] - mx);
  const float inv = 1.0f / lane_sum(n, [&](int j) { return row[j]; });
  for (int j = 0; j < n; ++j) row[j] *= inv;
  std::fill(row + n, row + T, 0.0f);
}

inline void sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                  const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
              n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

CpuDevice::CpuDevice() {
  // Ranks are the parallelism; BLAS threads would oversubscribe the cores. Respect an explicit
  // setting other than 1 (someone measuring threaded BLAS on purpose).
  const char* env = std::getenv("OPENBLAS_NUM_THREADS");
  if (env == nullptr || std::atoi(env) == 1) openblas_set_num_threads(1);
  cache_ = std::make_unique<CachingAllocator>(
      prefaulted_host_allocator(), [](void* p, size_t bytes) { std::memset(p, 0, bytes); });
}

void CpuDevice::copy_to_device(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuDevice::copy_to_host(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuDevice::copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }
void CpuDevice::fill_zero(void* dst, size_t bytes) { std::memset(dst, 0, bytes); }

void CpuDevice::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                     const float* a, int lda, const float* b, int ldb, float beta, float* c,
                     int ldc) {
  sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void CpuDevice::linear_forward(float* out, const float* x, const float* w, const float* b,
                               int rows, int in, int out_features) {
  // Seed out with the bias and let sgemm accumulate (beta = 1): one pass instead of two.
  if (b != nullptr) {
    for (int r = 0; r < rows; ++r)
      std::memcpy(out + size_t(r) * out_features, b, sizeof(float) * out_features);
  }
  sgemm(false, true, rows, out_features, in, 1.0f, x, in, w, in, b != nullptr ? 1.0f : 0.0f,
        out, out_features);
}

void CpuDevice::linear_backward(float* dx, float* dw, float* db, const float* dout,
                                const float* x, const float* w, int rows, int in,
                                int out_features) {
  if (dx != nullptr)  // dx = dout W
    sgemm(false, false, rows, in, out_features, 1.0f, dout, out_features, w, in, 0.0f, dx, in);
  // dW += dout^T x
  sgemm(true, false, out_features, in, rows, 1.0f, dout, out_features, x, in, 1.0f, dw, in);
  if (db != nullptr) {
    for (int r = 0; r < rows; ++r) {
      const float* g = dout + size_t(r) * out_features;
      for (int o = 0; o < out_features; ++o) db[o] += g[o];
    }
  }
}

void CpuDevice::layernorm_forward(float* out, float* mean, float* rstd, const float* x,
                                  const float* w, const float* b, int rows, int C) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + size_t(r) * C;
    float* o = out + size_t(r) * C;
    // Two passes (mean, then centred variance): no cancellation when |mean| >> std.
    const float m = lane_sum(C, [&](int i) { return xr[i]; }) / float(C);
    const float var = lane_sum(C, [&](int i) { return (xr[i] - m) * (xr[i] - m); }) / float(C);
    const float s = 1.0f / std::sqrt(var + kLnEps);
    for (int i = 0; i < C; ++i) o[i] = (xr[i] - m) * s * w[i] + b[i];
    mean[r] = m;
    rstd[r] = s;
  }
}

void CpuDevice::layernorm_backward(float* dx, float* dw, float* db, const float* dout,
                                   const float* x, const float* w, const float* mean,
                                   const float* rstd, int rows, int C) {
  // llm.c's layernorm_backward: dx = rstd * (w*dout - mean(w*dout) - xhat * mean(w*dout*xhat)).
  for (int r = 0; r < rows; ++r) {
    const float* g = dout + size_t(r) * C;
    const float* xr = x + size_t(r) * C;
    float* dxr = dx + size_t(r) * C;
    const float m = mean[r], s = rstd[r];
    const float mean_g = lane_sum(C, [&](int i) { return w[i] * g[i]; }) / float(C);
    const float mean_gx =
        lane_sum(C, [&](int i) { return w[i] * g[i] * (xr[i] - m) * s; }) / float(C);
    // Two loops, not one: with three outputs the alias checks exceed what GCC versions for.
    for (int i = 0; i < C; ++i) {
      db[i] += g[i];
      dw[i] += (xr[i] - m) * s * g[i];
    }
    for (int i = 0; i < C; ++i) dxr[i] += s * (w[i] * g[i] - mean_g - (xr[i] - m) * s * mean_gx);
  }
}

namespace {
constexpr float kGeluS = 0.7978845608028654f;  // sqrt(2/pi), GPT-2's tanh approximation
constexpr float kGeluA = 0.044715f;
}  // namespace

void CpuDevice::gelu_forward(float* out, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    out[i] = 0.5f * v * (1.0f + fast_tanh(kGeluS * (v + kGeluA * v * v * v)));
  }
}

void CpuDevice::gelu_backward(float* dx, const float* x, const float* dout, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float th = fast_tanh(kGeluS * (v + kGeluA * v * v * v));
    const float sech2 = 1.0f - th * th;
    const float grad =
        0.5f * (1.0f + th) + 0.5f * v * sech2 * kGeluS * (1.0f + 3.0f * kGeluA * v * v);
    dx[i] = grad * dout[i];
  }
}

void CpuDevice::attention_forward(float* out, float* att, const float* qkv, int B, int T, int C,
                                  int NH) {
  // Per (batch, head): scores = Q K^T / sqrt(hs) straight into att, causal softmax in place,
  // then out_h = att V. Q, K, V are strided views of qkv (ld 3C), out_h of out (ld C), so
  // nothing is transposed or copied.
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* q = qkv + size_t(b) * T * C3 + size_t(h) * hs;
      float* a = att + (size_t(b) * NH + h) * T * T;
      sgemm(false, true, T, T, hs, scale, q, C3, q + C, C3, 0.0f, a, T);
      for (int t = 0; t < T; ++t) masked_softmax_row(a + size_t(t) * T, t + 1, T);
      sgemm(false, false, T, hs, T, 1.0f, a, T, q + 2 * C, C3, 0.0f,
            out + size_t(b) * T * C + size_t(h) * hs, C);
    }
  }
}

void CpuDevice::attention_backward(float* dqkv, float* datt, const float* dout,
                                   const float* qkv, const float* att, int B, int T, int C,
                                   int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const size_t off = size_t(b) * T * C3 + size_t(h) * hs;
      const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
      float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
      const float* g = dout + size_t(b) * T * C + size_t(h) * hs;
      const float* a = att + (size_t(b) * NH + h) * T * T;
      float* d = datt + (size_t(b) * NH + h) * T * T;
      sgemm(false, true, T, T, hs, 1.0f, g, C, v, C3, 0.0f, d, T);  // datt = dout_h V^T
      sgemm(true, false, T, hs, T, 1.0f, a, T, g, C, 0.0f, dv, C3);  // dV = att^T dout_h
      // Softmax backward in place: dscore = att * (datt - <att, datt>); masked entries are 0
      // because att is 0 there, so the full-width rows stay exact.
      for (int t = 0; t < T; ++t) {
        const float* ar = a + size_t(t) * T;
        float* dr = d + size_t(t) * T;
        const int n = t + 1;
        const float dot = lane_sum(n, [&](int j) { return ar[j] * dr[j]; });
        for (int j = 0; j < n; ++j) dr[j] = ar[j] * (dr[j] - dot);
        std::fill(dr + n, dr + T, 0.0f);
      }
      sgemm(false, false, T, hs, T, scale, d, T, k, C3, 0.0f, dq, C3);  // dQ = dS K / sqrt(hs)
      sgemm(true, false, T, hs, T, scale, d, T, q, C3, 0.0f, dk, C3);   // dK = dS^T Q / sqrt(hs)
    }
  }
}

// FlashAttention on the host: per (batch, head), query tiles of kTile rows against the key
// tiles at or left of the diagonal, each score / value product one sgemm over strided views of
// qkv. The tile scratch (three kTile² blocks) is the only memory beyond out and lse: small and
// fixed, so it is a local, not a tracked allocation.
namespace {
constexpr int kTile = 64;

struct FlashHead {  // one (batch, head)'s strided views
  const float *q, *k, *v;
  int ld, T;
};

// S[rows, cols] = scale * Q[i0..i0+rows) K[j0..j0+cols)^T into a kTile-wide block.
void tile_scores(float* s, const FlashHead& h, int i0, int rows, int j0, int cols, int hs,
                 float scale) {
  sgemm(false, true, rows, cols, hs, scale, h.q + size_t(i0) * h.ld, h.ld,
        h.k + size_t(j0) * h.ld, h.ld, 0.0f, s, kTile);
}
inline int causal_cols(int t, int j0, int cols) { return std::clamp(t - j0 + 1, 0, cols); }
}  // namespace

void CpuDevice::flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T,
                                        int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
  std::vector<float> s(size_t(kTile) * kTile), m(kTile), l(kTile);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* q = qkv + size_t(b) * T * C3 + size_t(h) * hs;
      const FlashHead fh{q, q + C, q + 2 * C, C3, T};
      float* lse_h = lse + (size_t(b) * NH + h) * T;
      for (int i0 = 0; i0 < T; i0 += kTile) {
        const int rows = std::min(kTile, T - i0);
        float* o = out + (size_t(b) * T + i0) * C + size_t(h) * hs;
        for (int r = 0; r < rows; ++r) std::fill(o + size_t(r) * C, o + size_t(r) * C + hs, 0.f);
        std::fill(m.begin(), m.end(), -INFINITY);
        std::fill(l.begin(), l.end(), 0.0f);
        for (int j0 = 0; j0 < i0 + rows; j0 += kTile) {
          const int cols = std::min(kTile, i0 + rows - j0);
          tile_scores(s.data(), fh, i0, rows, j0, cols, hs, scale);
          for (int r = 0; r < rows; ++r) {  // online softmax: rescale what is summed so far
            float* p = s.data() + size_t(r) * kTile;
            const int n = causal_cols(i0 + r, j0, cols);
            const float mx = std::max(m[r], n > 0 ? lane_max(n, p) : -INFINITY);
            const float corr = m[r] == -INFINITY ? 0.0f : fast_exp(m[r] - mx);
            for (int c = 0; c < n; ++c) p[c] = fast_exp(p[c] - mx);
            std::fill(p + n, p + cols, 0.0f);
            l[r] = l[r] * corr + lane_sum(n, [&](int c) { return p[c]; });
            m[r] = mx;
            float* orow = o + size_t(r) * C;
            for (int d = 0; d < hs; ++d) orow[d] *= corr;
          }
          sgemm(false, false, rows, hs, cols, 1.0f, s.data(), kTile, fh.v + size_t(j0) * C3, C3,
                1.0f, o, C);  // O_i += P V_j
        }
        for (int r = 0; r < rows; ++r) {
          const float inv = 1.0f / l[r];
          for (int d = 0; d < hs; ++d) o[size_t(r) * C + d] *= inv;
          lse_h[i0 + r] = m[r] + std::log(l[r]);
        }
      }
    }
  }
}

void CpuDevice::flash_attention_backward(float* dqkv, float* delta, const float* dout,
                                         const float* qkv, const float* out, const float* lse,
                                         int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
  std::memset(dqkv, 0, sizeof(float) * size_t(B) * T * C3);  // the tiles accumulate (+=)
  std::vector<float> p(size_t(kTile) * kTile), dp(size_t(kTile) * kTile);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const size_t off = size_t(b) * T * C3 + size_t(h) * hs, ooff = size_t(b) * T * C + h * hs;
      const FlashHead fh{qkv + off, qkv + off + C, qkv + off + 2 * C, C3, T};
      float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
      const float* g = dout + ooff;
      const float* lse_h = lse + (size_t(b) * NH + h) * T;
      float* dl = delta + (size_t(b) * NH + h) * T;
      for (int t = 0; t < T; ++t) {  // D_t = <dO_t, O_t> = sum_j P_tj dP_tj
        const float *gt = g + size_t(t) * C, *ot = out + ooff + size_t(t) * C;
        dl[t] = lane_sum(hs, [&](int d) { return gt[d] * ot[d]; });
      }
      for (int i0 = 0; i0 < T; i0 += kTile) {
        const int rows = std::min(kTile, T - i0);
        for (int j0 = 0; j0 < i0 + rows; j0 += kTile) {
          const int cols = std::min(kTile, i0 + rows - j0);
          tile_scores(p.data(), fh, i0, rows, j0, cols, hs, scale);
          for (int r = 0; r < rows; ++r) {  // P recomputed from the saved log-sum-exp
            float* pr = p.data() + size_t(r) * kTile;
            const int n = causal_cols(i0 + r, j0, cols);
            for (int c = 0; c < n; ++c) pr[c] = fast_exp(pr[c] - lse_h[i0 + r]);
            std::fill(pr + n, pr + cols, 0.0f);
          }
          const float* gi = g + size_t(i0) * C;
          // dV_j += P^T dO_i;  dP = dO_i V_j^T
          sgemm(true, false, cols, hs, rows, 1.0f, p.data(), kTile, gi, C, 1.0f,
                dv + size_t(j0) * C3, C3);
          sgemm(false, true, rows, cols, hs, 1.0f, gi, C, fh.v + size_t(j0) * C3, C3, 0.0f,
                dp.data(), kTile);
          for (int r = 0; r < rows; ++r) {  // dS = P * (dP - D), in place of dP
            const float *pr = p.data() + size_t(r) * kTile, di = dl[i0 + r];
            float* dr = dp.data() + size_t(r) * kTile;
            for (int c = 0; c < cols; ++c) dr[c] = pr[c] * (dr[c] - di);
          }
          // dQ_i += scale dS K_j;  dK_j += scale dS^T Q_i
          sgemm(false, false, rows, hs, cols, scale, dp.data(), kTile, fh.k + size_t(j0) * C3,
                C3, 1.0f, dq + size_t(i0) * C3, C3);
          sgemm(true, false, cols, hs, rows, scale, dp.data(), kTile, fh.q + size_t(i0) * C3,
                C3, 1.0f, dk + size_t(j0) * C3, C3);
        }
      }
    }
  }
}

void CpuDevice::embedding_forward(float* out, const int* tokens, const float* wte,
                                  const float* wpe, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const int tok = tokens[b * T + t];
      const float* e = wte + size_t(tok) * C;
      float* o = out + (size_t(b) * T + t) * C;
      if (wpe == nullptr) {  // the Llama block: positions come from RoPE
        std::copy(e, e + C, o);
        continue;
      }
      const float* p = wpe + size_t(t) * C;
      for (int i = 0; i < C; ++i) o[i] = e[i] + p[i];
    }
  }
}

void CpuDevice::embedding_backward(float* dwte, float* dwpe, const float* dout,
                                   const int* tokens, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const float* g = dout + (size_t(b) * T + t) * C;
      float* de = dwte + size_t(tokens[b * T + t]) * C;
      for (int i = 0; i < C; ++i) de[i] += g[i];
      if (dwpe == nullptr) continue;
      float* dp = dwpe + size_t(t) * C;
      for (int i = 0; i < C; ++i) dp[i] += g[i];
    }
  }
}

float CpuDevice::softmax_crossentropy_forward(float* probs, const float* logits,
                                              const int* targets, int rows, int V) {
  double total = 0.0;
  for (int r = 0; r < rows; ++r) {
    const float* x = logits + size_t(r) * V;
    float* p = probs + size_t(r) * V;
    const int y = targets[r];
    SB_CHECK(y >= 0 && y < V, "target " << y << " of row " << r << " outside vocab " << V);
    const float mx = lane_max(V, x);
    for (int j = 0; j < V; ++j) p[j] = fast_exp(x[j] - mx);
    const float sum = lane_sum(V, [&](int j) { return p[j]; });
    const float inv = 1.0f / sum;
    for (int j = 0; j < V; ++j) p[j] *= inv;
    // -log p_y from the logits (log-sum-exp): finite even when p_y underflows.
    total += double(std::log(sum)) + double(mx) - double(x[y]);
  }
  return float(total / rows);
}

void CpuDevice::crossentropy_backward(float* dlogits, const float* probs, const int* targets,
                                      int rows, int V, float scale) {
  for (int r = 0; r < rows; ++r) {
    const float* p = probs + size_t(r) * V;
    float* d = dlogits + size_t(r) * V;
    for (int j = 0; j < V; ++j) d[j] = p[j] * scale;
    d[targets[r]] -= scale;
  }
}

void CpuDevice::add_inplace(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuDevice::scale_inplace(float* y, float s, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] *= s;
}

void CpuDevice::adamw(float* p, const float* g, float* m, float* v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, int step,
                      float grad_scale) {
  SB_CHECK(step >= 1, "AdamW step counts from 1, got " << step);
  // Bias correction (Kingma & Ba 2015, Alg. 1); decay decoupled from the gradient
  // (Loshchilov & Hutter 2019), written as llm.c's adamw_update does.
  const float c1 = 1.0f - std::pow(beta1, float(step));
  const float c2 = 1.0f - std::pow(beta2, float(step));
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * ((mi / c1) / (std::sqrt(vi / c2) + eps) + weight_decay * p[i]);
  }
}

void CpuDevice::bf16_to_f32(float* dst, const uint16_t* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = sb::bf16_to_f32(src[i]);
}

void CpuDevice::f32_to_bf16(uint16_t* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = sb::f32_to_bf16(src[i]);
}

std::unique_ptr<Device> make_cpu_device() { return std::make_unique<CpuDevice>(); }

void select_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") || std::getenv("SB_KEEP_BLAS_CORETYPE")) return;
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")))
    return;
  setenv("OPENBLAS_CORETYPE", "SKYLAKEX", 1);
  execv("/proc/self/exe", argv);  // on failure, carry on with OpenBLAS's own choice
}

}  // namespace sb
