// The CUDA kernels behind CudaDevice (included by cuda_device.cu only, one translation unit):
// one-thread-per-element elementwise kernels, deterministic two-pass column sums, one warp per
// row for layernorm and the causal softmax, one block per row for cross-entropy. The launch
// configuration and the cuBLAS calls stay in cuda_device.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

namespace sb {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr float kLnEps = 1e-5f;                // GPT-2 / llm.c layernorm epsilon
constexpr float kGeluScale = 0.7978845608f;    // sqrt(2/pi), tanh approximation of GELU

int grid_for(size_t n) {
  // Grid-stride loops below, so the grid only needs to fill the GPU, not cover n.
  return int(std::min<size_t>((n + kThreads - 1) / kThreads, size_t(1) << 16));
}

__device__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide reduction for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
template <float (*WarpOp)(float)>
__device__ float block_reduce(float v, float identity) {
  __shared__ float sh[kWarp];
  __shared__ float total;
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = WarpOp(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < int(blockDim.x / kWarp) ? sh[lane] : identity;
    s = WarpOp(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}
__device__ float block_sum(float v) { return block_reduce<warp_sum>(v, 0.f); }
__device__ float block_max(float v) { return block_reduce<warp_max>(v, -INFINITY); }

// ---- elementwise ------------------------------------------------------------------------------
__global__ void add_bias_kernel(float* out, const float* b, size_t rows, int cols) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] += b[i % cols];
}
__global__ void add_kernel(float* y, const float* x, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    y[i] += x[i];
}
__global__ void scale_kernel(float* y, float s, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    y[i] *= s;
}
__global__ void gelu_forward_kernel(float* out, const float* x, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float v = x[i];
    out[i] = 0.5f * v * (1.f + tanhf(kGeluScale * (v + 0.044715f * v * v * v)));
  }
}
__global__ void gelu_backward_kernel(float* dx, const float* x, const float* dout, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float v = x[i];
    float th = tanhf(kGeluScale * (v + 0.044715f * v * v * v));
    float sech2 = 1.f - th * th;
    float local = 0.5f * (1.f + th) +
                  v * 0.5f * sech2 * kGeluScale * (1.f + 3.f * 0.044715f * v * v);
    dx[i] = local * dout[i];
  }
}
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, size_t n, float lr,
                             float beta1, float beta2, float eps, float wd, float bc1, float bc2,
                             float grad_scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float gi = g[i] * grad_scale;
    float mi = beta1 * m[i] + (1.f - beta1) * gi;
    float vi = beta2 * v[i] + (1.f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
  }
}
__global__ void bf16_to_f32_kernel(float* dst, const uint16_t* src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = __uint_as_float(uint32_t(src[i]) << 16);
}
__global__ void f32_to_bf16_kernel(uint16_t* dst, const float* src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));  // round to nearest even
}

// A batch of strided row-major [rows, cols] matrices (row stride ld, batch stride `stride`)
// rounded to bf16 into a packed [batch, rows, cols] copy: the operand of a bf16 GEMM.
__global__ void strided_to_bf16_kernel(__nv_bfloat16* dst, const float* src, int rows, int cols,
                                       int ld, long long stride, int batch) {
  const size_t per = size_t(rows) * cols, n = per * batch;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t b = i / per, r = i % per / cols, c = i % cols;
    dst[i] = __float2bfloat16_rn(src[b * stride + r * ld + c]);
  }
}

// ---- column sums (bias and layernorm weight grads), deterministic in two passes --------------
// Pass 1: block (32 columns x 8 row lanes) sums one chunk of rows into part[chunk, C].
// kLn: part_a += dout * xhat (dweight), part_b += dout (dbias); else part_a += dout.
template <bool kLn>
__global__ void col_partials_kernel(float* part_a, float* part_b, const float* dout,
                                    const float* x, const float* mean, const float* rstd,
                                    int rows, int C, int rows_per_chunk) {
  __shared__ float sha[8][kWarp + 1], shb[8][kWarp + 1];
  int c = blockIdx.x * kWarp + threadIdx.x;
  int r0 = blockIdx.y * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  float sa = 0.f, sb = 0.f;
  if (c < C) {
    for (int r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
      float d = dout[size_t(r) * C + c];
      if (kLn) {
        sa += d * (x[size_t(r) * C + c] - mean[r]) * rstd[r];
        sb += d;
      } else {
        sa += d;
      }
    }
  }
  sha[threadIdx.y][threadIdx.x] = sa;
  shb[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float ta = 0.f, tb = 0.f;
    for (int i = 0; i < blockDim.y; ++i) {
      ta += sha[i][threadIdx.x];
      tb += shb[i][threadIdx.x];
    }
    part_a[size_t(blockIdx.y) * C + c] = ta;
    if (kLn) part_b[size_t(blockIdx.y) * C + c] = tb;
  }
}
// Pass 2: out[c] += sum over chunks (fixed order).
__global__ void col_finish_kernel(float* out, const float* part, int chunks, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.f;
  for (int k = 0; k < chunks; ++k) s += part[size_t(k) * C + c];
  out[c] += s;
}

// ---- layernorm: one warp per row ------------------------------------------------------------
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* x,
                                         const float* w, const float* b, int rows, int C) {
  int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float* xr = x + size_t(row) * C;
  float s = 0.f;
  for (int i = lane; i < C; i += kWarp) s += xr[i];
  float mu = warp_sum(s) / C;
  float v = 0.f;
  for (int i = lane; i < C; i += kWarp) v += (xr[i] - mu) * (xr[i] - mu);
  float rs = rsqrtf(warp_sum(v) / C + kLnEps);
  float* orow = out + size_t(row) * C;
  for (int i = lane; i < C; i += kWarp) orow[i] = (xr[i] - mu) * rs * w[i] + b[i];
  if (lane == 0) {
    if (mean) mean[row] = mu;
    if (rstd) rstd[row] = rs;
  }
}
// dx += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * w.
__global__ void layernorm_backward_dx_kernel(float* dx, const float* dout, const float* x,
                                             const float* w, const float* mean,
                                             const float* rstd, int rows, int C) {
  int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float* xr = x + size_t(row) * C;
  const float* dr = dout + size_t(row) * C;
  float mu = mean[row], rs = rstd[row];
  float s1 = 0.f, s2 = 0.f;
  for (int i = lane; i < C; i += kWarp) {
    float dn = dr[i] * w[i];
    s1 += dn;
    s2 += dn * (xr[i] - mu) * rs;
  }
  float dn_mean = warp_sum(s1) / C, dn_xhat_mean = warp_sum(s2) / C;
  float* dxr = dx + size_t(row) * C;
  for (int i = lane; i < C; i += kWarp) {
    float xhat = (xr[i] - mu) * rs;
    dxr[i] += rs * (dr[i] * w[i] - dn_mean - xhat * dn_xhat_mean);
  }
}

// ---- attention softmax over the causal row (one warp per row of [B*NH*T, T]) -----------------
__global__ void causal_softmax_kernel(float* att, int nrows, int T) {
  int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  int lane = threadIdx.x % kWarp;
  if (row >= nrows) return;
  int t = row % T;
  float* a = att + size_t(row) * T;
  float mx = -INFINITY;
  for (int i = lane; i <= t; i += kWarp) mx = fmaxf(mx, a[i]);
  mx = warp_max(mx);
  float s = 0.f;
  for (int i = lane; i <= t; i += kWarp) {
    float e = expf(a[i] - mx);
    a[i] = e;
    s += e;
  }
  float inv = 1.f / warp_sum(s);
  for (int i = lane; i < T; i += kWarp) a[i] = i <= t ? a[i] * inv : 0.f;  // masked -> 0
}
// In place: d[i] = att[i] * (d[i] - sum_j att[j] d[j]) (softmax Jacobian; masked att = 0).
__global__ void causal_softmax_backward_kernel(float* datt, const float* att, int nrows,
                                               int T) {
  int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  int lane = threadIdx.x % kWarp;
  if (row >= nrows) return;
  int t = row % T;
  const float* a = att + size_t(row) * T;
  float* d = datt + size_t(row) * T;
  float s = 0.f;
  for (int i = lane; i <= t; i += kWarp) s += a[i] * d[i];
  s = warp_sum(s);
  for (int i = lane; i < T; i += kWarp) d[i] = i <= t ? a[i] * (d[i] - s) : 0.f;
}

// ---- embedding ------------------------------------------------------------------------------
__global__ void embedding_forward_kernel(float* out, const int* tokens, const float* wte,
                                         const float* wpe, int B, int T, int C) {
  size_t n = size_t(B) * T * C;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    size_t bt = i / C;
    int c = int(i % C), t = int(bt % T);
    out[i] = wte[size_t(tokens[bt]) * C + c] + (wpe ? wpe[size_t(t) * C + c] : 0.f);
  }
}
// Repeated tokens collide, hence atomics (order-dependent rounding, as llm.c's first version).
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const int* tokens,
                                              int B, int T, int C) {
  size_t n = size_t(B) * T * C;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    size_t bt = i / C;
    atomicAdd(&dwte[size_t(tokens[bt]) * C + i % C], dout[i]);
  }
}
// Positions never collide within one b, so a fixed-order loop over b is exact and deterministic.
__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T,
                                              int C) {
  size_t n = size_t(T) * C;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int b = 0; b < B; ++b) s += dout[size_t(b) * T * C + i];
    dwpe[i] += s;
  }
}

// ---- softmax cross-entropy: one block per row ------------------------------------------------
__global__ void softmax_xent_kernel(float* probs, float* row_loss, const float* logits,
                                    const int* targets, int V) {
  size_t row = blockIdx.x;
  const float* l = logits + row * V;
  float* p = probs + row * V;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, l[i]);
  mx = block_max(mx);
  float s = 0.f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    float e = expf(l[i] - mx);
    p[i] = e;
    s += e;
  }
  s = block_sum(s);
  float inv = 1.f / s;
  for (int i = threadIdx.x; i < V; i += blockDim.x) p[i] *= inv;
  // -log p[target] as log-sum-exp minus the target logit: no log(0) for tiny probabilities.
  // A target outside the vocabulary poisons the loss (NaN) instead of reading out of bounds.
  if (threadIdx.x == 0) {
    int y = targets[row];
    row_loss[row] = (y >= 0 && y < V) ? logf(s) + mx - l[y] : NAN;
  }
}
__global__ void mean_kernel(float* out, const float* v, int n) {
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += v[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = s / n;
}
__global__ void xent_backward_kernel(float* dlogits, const float* probs, const int* targets,
                                     size_t rows, int V, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < rows * V;
       i += size_t(gridDim.x) * blockDim.x) {
    size_t r = i / V;
    int c = int(i % V);
    dlogits[i] = (probs[i] - (c == targets[r] ? 1.f : 0.f)) * scale;
  }
}

cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace
}  // namespace sb
