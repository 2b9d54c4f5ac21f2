// FlashAttention's forward and backward (Dao et al. 2022, Alg. 1-2, with FlashAttention-2's
// row delta D) as plain CUDA: one block per (query or key tile, head, batch), one thread per row,
// operands read from global memory. Written to be simple and checkably correct, not fast: no
// shared-memory staging, no tensor cores, fp32 throughout. Included by cuda_device.cu only.
#pragma once

namespace sb {
namespace {

constexpr int kFlashRows = 64;   // rows (threads) per block
constexpr int kFlashMaxHead = 256;  // head size limit of the per-thread accumulators

// Row t of head h in batch b of a [B, T, ld] tensor whose head h starts at column `col`.
__device__ inline size_t flash_row(int b, int t, int T, int ld, int col) {
  return (size_t(b) * T + t) * ld + col;
}

// s = q·k and dp = g·v over one head (the score before scaling and dP of one (query, key) pair).
__device__ inline void flash_dots(const float* q, const float* k, const float* g, const float* v,
                                  int hs, float& s, float& dp) {
  s = 0.f;
  dp = 0.f;
  for (int d = 0; d < hs; ++d) {
    s += q[d] * k[d];
    dp += g[d] * v[d];
  }
}

// out[t] = sum_j softmax_j(scale q_t.k_j) v_j over j <= t with an online softmax; lse[t] kept.
__global__ void flash_forward_kernel(float* out, float* lse, const float* qkv, int T, int C,
                                     int NH) {
  const int b = blockIdx.z, h = blockIdx.y, t = blockIdx.x * kFlashRows + threadIdx.x;
  if (t >= T) return;
  const int hs = C / NH, C3 = 3 * C;
  const float scale = rsqrtf(float(hs));
  const float* q = qkv + flash_row(b, t, T, C3, h * hs);
  float acc[kFlashMaxHead];
  for (int d = 0; d < hs; ++d) acc[d] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j <= t; ++j) {
    const float* k = qkv + flash_row(b, j, T, C3, C + h * hs);
    float s = 0.f;
    for (int d = 0; d < hs; ++d) s += q[d] * k[d];
    s *= scale;
    const float mx = fmaxf(m, s);
    const float corr = expf(m - mx), p = expf(s - mx);  // expf(-inf) = 0 on the first key
    l = l * corr + p;
    const float* v = k + C;
    for (int d = 0; d < hs; ++d) acc[d] = acc[d] * corr + p * v[d];
    m = mx;
  }
  float* o = out + flash_row(b, t, T, C, h * hs);
  for (int d = 0; d < hs; ++d) o[d] = acc[d] / l;
  lse[(size_t(b) * NH + h) * T + t] = m + logf(l);
}

// delta[t] = <dout_t, out_t>
__global__ void flash_delta_kernel(float* delta, const float* dout, const float* out, int T,
                                   int C, int NH) {
  const int b = blockIdx.z, h = blockIdx.y, t = blockIdx.x * kFlashRows + threadIdx.x;
  if (t >= T) return;
  const int hs = C / NH;
  const float *g = dout + flash_row(b, t, T, C, h * hs), *o = out + flash_row(b, t, T, C, h * hs);
  float s = 0.f;
  for (int d = 0; d < hs; ++d) s += g[d] * o[d];
  delta[(size_t(b) * NH + h) * T + t] = s;
}

// One thread per key j: dV_j = sum_{t>=j} P_tj dO_t, dK_j = scale sum_{t>=j} dS_tj q_t (=).
__global__ void flash_dkv_kernel(float* dqkv, const float* dout, const float* qkv,
                                 const float* lse, const float* delta, int T, int C, int NH) {
  const int b = blockIdx.z, h = blockIdx.y, j = blockIdx.x * kFlashRows + threadIdx.x;
  if (j >= T) return;
  const int hs = C / NH, C3 = 3 * C;
  const float scale = rsqrtf(float(hs));
  const float* k = qkv + flash_row(b, j, T, C3, C + h * hs);
  const float* v = k + C;
  const float *lse_h = lse + (size_t(b) * NH + h) * T, *dl = delta + (size_t(b) * NH + h) * T;
  float dk[kFlashMaxHead], dv[kFlashMaxHead];
  for (int d = 0; d < hs; ++d) dk[d] = dv[d] = 0.f;
  for (int t = j; t < T; ++t) {
    const float* q = qkv + flash_row(b, t, T, C3, h * hs);
    const float* g = dout + flash_row(b, t, T, C, h * hs);
    float s, dp;
    flash_dots(q, k, g, v, hs, s, dp);
    const float p = expf(s * scale - lse_h[t]);  // the probability, recomputed
    const float ds = p * (dp - dl[t]);
    for (int d = 0; d < hs; ++d) {
      dv[d] += p * g[d];
      dk[d] += scale * ds * q[d];
    }
  }
  float* dkr = dqkv + flash_row(b, j, T, C3, C + h * hs);
  for (int d = 0; d < hs; ++d) {
    dkr[d] = dk[d];
    dkr[C + d] = dv[d];
  }
}

// One thread per query t: dQ_t = scale sum_{j<=t} dS_tj k_j (=).
__global__ void flash_dq_kernel(float* dqkv, const float* dout, const float* qkv,
                                const float* lse, const float* delta, int T, int C, int NH) {
  const int b = blockIdx.z, h = blockIdx.y, t = blockIdx.x * kFlashRows + threadIdx.x;
  if (t >= T) return;
  const int hs = C / NH, C3 = 3 * C;
  const float scale = rsqrtf(float(hs));
  const float* q = qkv + flash_row(b, t, T, C3, h * hs);
  const float* g = dout + flash_row(b, t, T, C, h * hs);
  const float lse_t = lse[(size_t(b) * NH + h) * T + t], d_t = delta[(size_t(b) * NH + h) * T + t];
  float dq[kFlashMaxHead];
  for (int d = 0; d < hs; ++d) dq[d] = 0.f;
  for (int j = 0; j <= t; ++j) {
    const float* k = qkv + flash_row(b, j, T, C3, C + h * hs);
    const float* v = k + C;
    float s, dp;
    flash_dots(q, k, g, v, hs, s, dp);
    const float ds = expf(s * scale - lse_t) * (dp - d_t);
    for (int d = 0; d < hs; ++d) dq[d] += scale * ds * k[d];
  }
  float* dqr = dqkv + flash_row(b, t, T, C3, h * hs);
  for (int d = 0; d < hs; ++d) dqr[d] = dq[d];
}

}  // namespace
}  // namespace sb
