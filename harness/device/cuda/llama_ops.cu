// CudaDevice's kernels of the Llama block (device.h): RMSNorm (one warp per row; the gain's
// gradient one thread per column over all rows, a fixed order, so deterministic), SwiGLU
// (elementwise), rotary embeddings with grouped-query K/V sharing (one thread per rotary pair).
// Semantics and angles (in double) as cpu_llama_ops.cc; "good, not tuned".
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "harness/device/cuda/cuda_check.h"
#include "harness/device/cuda/cuda_device.h"

namespace sb {
namespace {

constexpr int kLlamaThreads = 256;
constexpr int kLlamaWarp = 32;
constexpr float kRmsEps = 1e-5f;  // Llama 2 / 3 norm_eps

int llama_grid(size_t n) {
  return int(std::min<size_t>((n + kLlamaThreads - 1) / kLlamaThreads, size_t(1) << 16));
}

__device__ float llama_warp_sum(float v) {
  for (int o = kLlamaWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* x, const float* w,
                                       int rows, int C) {
  const int r = blockIdx.x * (blockDim.x / kLlamaWarp) + threadIdx.x / kLlamaWarp;
  const int lane = threadIdx.x % kLlamaWarp;
  if (r >= rows) return;
  const float* xr = x + size_t(r) * C;
  float ss = 0.f;
  for (int i = lane; i < C; i += kLlamaWarp) ss += xr[i] * xr[i];
  const float s = rsqrtf(llama_warp_sum(ss) / C + kRmsEps);
  if (lane == 0) rstd[r] = s;
  for (int i = lane; i < C; i += kLlamaWarp) out[size_t(r) * C + i] = xr[i] * s * w[i];
}

__global__ void rmsnorm_backward_dx_kernel(float* dx, const float* dout, const float* x,
                                           const float* w, const float* rstd, int rows, int C) {
  const int r = blockIdx.x * (blockDim.x / kLlamaWarp) + threadIdx.x / kLlamaWarp;
  const int lane = threadIdx.x % kLlamaWarp;
  if (r >= rows) return;
  const float* xr = x + size_t(r) * C;
  const float* dr = dout + size_t(r) * C;
  float gx = 0.f;
  for (int i = lane; i < C; i += kLlamaWarp) gx += dr[i] * w[i] * xr[i];
  const float s = rstd[r];
  const float k = llama_warp_sum(gx) / C * s * s;
  for (int i = lane; i < C; i += kLlamaWarp)
    dx[size_t(r) * C + i] += s * (dr[i] * w[i] - xr[i] * k);
}

__global__ void rmsnorm_backward_dw_kernel(float* dw, const float* dout, const float* x,
                                           const float* rstd, int rows, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.f;
  for (int r = 0; r < rows; ++r) s += dout[size_t(r) * C + c] * x[size_t(r) * C + c] * rstd[r];
  dw[c] += s;
}

__global__ void swiglu_forward_kernel(float* out, const float* h, int rows, int F) {
  const size_t n = size_t(rows) * F;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / F, j = i % F;
    const float g = h[r * 2 * F + j], u = h[r * 2 * F + F + j];
    out[i] = g / (1.f + expf(-g)) * u;
  }
}

__global__ void swiglu_backward_kernel(float* dh, const float* h, const float* dout, int rows,
                                       int F) {
  const size_t n = size_t(rows) * F;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / F, j = i % F;
    const float g = h[r * 2 * F + j], u = h[r * 2 * F + F + j];
    const float sig = 1.f / (1.f + expf(-g));
    dh[r * 2 * F + j] = dout[i] * u * sig * (1.f + g * (1.f - sig));
    dh[r * 2 * F + F + j] = dout[i] * g * sig;
  }
}

// (cos, sin) of position t for rotary pair i of a head of hd.
__device__ void rope_angle(int t, int i, int hd, float theta, float* c, float* s) {
  const double a = double(t) * pow(double(theta), -2.0 * i / hd);
  *c = float(cos(a));
  *s = float(sin(a));
}

// One thread per (b, t, query head, pair): rotated q, rotated shared k, copied shared v.
__global__ void rope_gqa_forward_kernel(float* qkv, const float* raw, int B, int T, int H,
                                        int KV, int hd, float theta) {
  const int P = hd / 2, C = H * hd, in_w = (H + 2 * KV) * hd;
  const size_t n = size_t(B) * T * H * P;
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < n;
       idx += size_t(gridDim.x) * blockDim.x) {
    const int i = int(idx % P), h = int(idx / P % H);
    const size_t bt = idx / (size_t(P) * H);
    const int t = int(bt % T), kvh = h / (H / KV);
    float c, s;
    rope_angle(t, i, hd, theta, &c, &s);
    const float* in = raw + bt * in_w;
    float* out = qkv + bt * 3 * C;
    const float* q = in + h * hd + 2 * i;
    const float* k = in + C + kvh * hd + 2 * i;
    const float* v = in + C + (KV + kvh) * hd + 2 * i;
    out[h * hd + 2 * i] = q[0] * c - q[1] * s;
    out[h * hd + 2 * i + 1] = q[0] * s + q[1] * c;
    out[C + h * hd + 2 * i] = k[0] * c - k[1] * s;
    out[C + h * hd + 2 * i + 1] = k[0] * s + k[1] * c;
    out[2 * C + h * hd + 2 * i] = v[0];
    out[2 * C + h * hd + 2 * i + 1] = v[1];
  }
}

// One thread per (b, t, query head, pair) for dq; per (b, t, K/V head, pair) for dk, dv summed
// over the head's query group in a fixed order.
__global__ void rope_gqa_backward_kernel(float* draw, const float* dqkv, int B, int T, int H,
                                         int KV, int hd, float theta) {
  const int P = hd / 2, C = H * hd, in_w = (H + 2 * KV) * hd, group = H / KV;
  const size_t n = size_t(B) * T * H * P;
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < n;
       idx += size_t(gridDim.x) * blockDim.x) {
    const int i = int(idx % P), h = int(idx / P % H);
    const size_t bt = idx / (size_t(P) * H);
    const int t = int(bt % T);
    float c, s;
    rope_angle(t, i, hd, theta, &c, &s);
    const float* d = dqkv + bt * 3 * C;
    float* out = draw + bt * in_w;
    const float* dq = d + h * hd + 2 * i;
    out[h * hd + 2 * i] = dq[0] * c + dq[1] * s;
    out[h * hd + 2 * i + 1] = -dq[0] * s + dq[1] * c;
    if (h % group != 0) continue;  // the group's first query head owns its K/V head
    const int kvh = h / group;
    float k0 = 0.f, k1 = 0.f, v0 = 0.f, v1 = 0.f;
    for (int g = h; g < h + group; ++g) {
      const float* dk = d + C + g * hd + 2 * i;
      const float* dv = d + 2 * C + g * hd + 2 * i;
      k0 += dk[0] * c + dk[1] * s;
      k1 += -dk[0] * s + dk[1] * c;
      v0 += dv[0];
      v1 += dv[1];
    }
    out[C + kvh * hd + 2 * i] = k0;
    out[C + kvh * hd + 2 * i + 1] = k1;
    out[C + (KV + kvh) * hd + 2 * i] = v0;
    out[C + (KV + kvh) * hd + 2 * i + 1] = v1;
  }
}

}  // namespace

void CudaDevice::rmsnorm_forward(float* out, float* rstd, const float* x, const float* w,
                                 int rows, int C) {
  if (rows == 0) return;
  const int per = kLlamaThreads / kLlamaWarp;
  rmsnorm_forward_kernel<<<(rows + per - 1) / per, kLlamaThreads, 0, stream()>>>(out, rstd, x,
                                                                                 w, rows, C);
  SB_CUDA_CHECK_LAUNCH();
}

void CudaDevice::rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x,
                                  const float* w, const float* rstd, int rows, int C) {
  if (rows == 0) return;
  const int per = kLlamaThreads / kLlamaWarp;
  rmsnorm_backward_dx_kernel<<<(rows + per - 1) / per, kLlamaThreads, 0, stream()>>>(
      dx, dout, x, w, rstd, rows, C);
  SB_CUDA_CHECK_LAUNCH();
  rmsnorm_backward_dw_kernel<<<(C + kLlamaThreads - 1) / kLlamaThreads, kLlamaThreads, 0,
                               stream()>>>(dw, dout, x, rstd, rows, C);
  SB_CUDA_CHECK_LAUNCH();
}

void CudaDevice::swiglu_forward(float* out, const float* h, int rows, int F) {
  const size_t n = size_t(rows) * F;
  if (n == 0) return;
  swiglu_forward_kernel<<<llama_grid(n), kLlamaThreads, 0, stream()>>>(out, h, rows, F);
  SB_CUDA_CHECK_LAUNCH();
}

void CudaDevice::swiglu_backward(float* dh, const float* h, const float* dout, int rows, int F) {
  const size_t n = size_t(rows) * F;
  if (n == 0) return;
  swiglu_backward_kernel<<<llama_grid(n), kLlamaThreads, 0, stream()>>>(dh, h, dout, rows, F);
  SB_CUDA_CHECK_LAUNCH();
}

void CudaDevice::rope_gqa_forward(float* qkv, const float* qkv_raw, int B, int T, int H, int KV,
                                  int hd, float theta) {
  const size_t n = size_t(B) * T * H * (hd / 2);
  if (n == 0) return;
  rope_gqa_forward_kernel<<<llama_grid(n), kLlamaThreads, 0, stream()>>>(qkv, qkv_raw, B, T, H,
                                                                         KV, hd, theta);
  SB_CUDA_CHECK_LAUNCH();
}

void CudaDevice::rope_gqa_backward(float* dqkv_raw, const float* dqkv, int B, int T, int H,
                                   int KV, int hd, float theta) {
  const size_t n = size_t(B) * T * H * (hd / 2);
  if (n == 0) return;
  rope_gqa_backward_kernel<<<llama_grid(n), kLlamaThreads, 0, stream()>>>(dqkv_raw, dqkv, B, T,
                                                                          H, KV, hd, theta);
  SB_CUDA_CHECK_LAUNCH();
}

}  // namespace sb
