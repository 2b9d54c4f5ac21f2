// CpuDevice's kernels of the Llama block (device.h): RMSNorm, SwiGLU, rotary embeddings with
// grouped-query K/V sharing. Plain loops in fp32 with double accumulators for the row sums;
// the matmuls of the block are the existing linear layers.
#include <algorithm>
#include <cmath>
#include <vector>

#include "harness/device/cpu_device.h"
#include "harness/device/cpu_math.h"

namespace sb {
namespace {

constexpr float kRmsEps = 1e-5f;  // Llama 2 / 3 norm_eps

// cos/sin of position t for rotary pair i: angle t * theta^(-2i/hd).
void rope_angles(std::vector<float>& cs, std::vector<float>& sn, int t, int hd, float theta) {
  for (int i = 0; i < hd / 2; ++i) {
    const double a = double(t) * std::pow(double(theta), -2.0 * i / hd);
    cs[i] = float(std::cos(a));
    sn[i] = float(std::sin(a));
  }
}

// y = R(t) x for one head (sign +1) or R(t)^T x (sign -1), accumulating when add.
void rotate(float* y, const float* x, const std::vector<float>& cs, const std::vector<float>& sn,
            int hd, float sign, bool add) {
  for (int i = 0; i < hd / 2; ++i) {
    const float x0 = x[2 * i], x1 = x[2 * i + 1], s = sign * sn[i];
    const float y0 = x0 * cs[i] - x1 * s, y1 = x0 * s + x1 * cs[i];
    y[2 * i] = add ? y[2 * i] + y0 : y0;
    y[2 * i + 1] = add ? y[2 * i + 1] + y1 : y1;
  }
}

}  // namespace

void CpuDevice::rmsnorm_forward(float* out, float* rstd, const float* x, const float* w,
                                int rows, int C) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + size_t(r) * C;
    double ss = 0;
    for (int i = 0; i < C; ++i) ss += double(xr[i]) * xr[i];
    const float s = float(1.0 / std::sqrt(ss / C + kRmsEps));
    rstd[r] = s;
    float* o = out + size_t(r) * C;
    for (int i = 0; i < C; ++i) o[i] = xr[i] * s * w[i];
  }
}

// y = x·s·w, s = (mean x² + eps)^-1/2: dx = s·(g - x·s²·mean(g·x)) with g = dout·w.
void CpuDevice::rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x,
                                 const float* w, const float* rstd, int rows, int C) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + size_t(r) * C;
    const float* dr = dout + size_t(r) * C;
    const float s = rstd[r];
    double gx = 0;
    for (int i = 0; i < C; ++i) gx += double(dr[i]) * w[i] * xr[i];
    const float k = float(gx / C) * s * s;
    float* d = dx + size_t(r) * C;
    for (int i = 0; i < C; ++i) {
      d[i] += s * (dr[i] * w[i] - xr[i] * k);
      dw[i] += dr[i] * xr[i] * s;
    }
  }
}

void CpuDevice::swiglu_forward(float* out, const float* h, int rows, int F) {
  for (int r = 0; r < rows; ++r) {
    const float* g = h + size_t(r) * 2 * F;
    const float* u = g + F;
    float* o = out + size_t(r) * F;
    for (int i = 0; i < F; ++i) o[i] = g[i] / (1.0f + fast_exp(-g[i])) * u[i];
  }
}

// silu(g) = g·σ(g), silu'(g) = σ(g)·(1 + g·(1 - σ(g))).
void CpuDevice::swiglu_backward(float* dh, const float* h, const float* dout, int rows, int F) {
  for (int r = 0; r < rows; ++r) {
    const float* g = h + size_t(r) * 2 * F;
    const float* u = g + F;
    const float* d = dout + size_t(r) * F;
    float* dg = dh + size_t(r) * 2 * F;
    float* du = dg + F;
    for (int i = 0; i < F; ++i) {
      const float sig = 1.0f / (1.0f + fast_exp(-g[i]));
      dg[i] = d[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
      du[i] = d[i] * g[i] * sig;
    }
  }
}

void CpuDevice::rope_gqa_forward(float* qkv, const float* qkv_raw, int B, int T, int H, int KV,
                                 int hd, float theta) {
  const int C = H * hd, in_w = (H + 2 * KV) * hd, group = H / KV;
  std::vector<float> cs(hd / 2), sn(hd / 2);
  for (int t = 0; t < T; ++t) {
    rope_angles(cs, sn, t, hd, theta);
    for (int b = 0; b < B; ++b) {
      const float* in = qkv_raw + (size_t(b) * T + t) * in_w;
      float* out = qkv + (size_t(b) * T + t) * 3 * C;
      for (int h = 0; h < H; ++h) {
        const int kvh = h / group;
        rotate(out + h * hd, in + h * hd, cs, sn, hd, 1.0f, false);
        rotate(out + C + h * hd, in + C + kvh * hd, cs, sn, hd, 1.0f, false);
        const float* v = in + C + (KV + kvh) * hd;
        std::copy(v, v + hd, out + 2 * C + h * hd);
      }
    }
  }
}

void CpuDevice::rope_gqa_backward(float* dqkv_raw, const float* dqkv, int B, int T, int H,
                                  int KV, int hd, float theta) {
  const int C = H * hd, in_w = (H + 2 * KV) * hd, group = H / KV;
  std::vector<float> cs(hd / 2), sn(hd / 2);
  for (int t = 0; t < T; ++t) {
    rope_angles(cs, sn, t, hd, theta);
    for (int b = 0; b < B; ++b) {
      float* din = dqkv_raw + (size_t(b) * T + t) * in_w;
      const float* dout = dqkv + (size_t(b) * T + t) * 3 * C;
      std::fill(din + C, din + in_w, 0.0f);
      for (int h = 0; h < H; ++h) {
        const int kvh = h / group;
        rotate(din + h * hd, dout + h * hd, cs, sn, hd, -1.0f, false);
        rotate(din + C + kvh * hd, dout + C + h * hd, cs, sn, hd, -1.0f, true);
        float* dv = din + C + (KV + kvh) * hd;
        const float* g = dout + 2 * C + h * hd;
        for (int i = 0; i < hd; ++i) dv[i] += g[i];
      }
    }
  }
}

}  // namespace sb
