// CudaDevice: every matmul through cuBLAS (fp32, TF32 when allowed; in bf16 matmul mode bf16
// operands with fp32 accumulation, on tensor cores) and plain one-thread-per-element /
// one-warp-per-row kernels for the rest, all on one compute stream. Semantics follow device.h and the CPU device exactly; speed
// is "good, not tuned" (fused attention is a plain kernel). Reductions over rows are deterministic except the
// embedding table gradient (atomicAdd, as llm.c), so repeated runs may differ in the last bits.
#include "harness/device/cuda/cuda_device.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "harness/device/cuda/cuda_check.h"

#include "harness/device/cuda/cuda_kernels.cuh"
#include "harness/device/cuda/flash_kernels.cuh"

namespace sb {

namespace {
// cudaMalloc, zero-filled on the compute stream (ordered before every later kernel, and before
// collectives: the NCCL stream waits on the compute stream first); OOM as OutOfMemory.
RawAllocator cuda_malloc_allocator(const std::string& device_name, cudaStream_t stream) {
  RawAllocator raw;
  raw.allocate = [device_name, stream](size_t bytes) -> void* {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the error so the run can report "oom" and go on
      std::ostringstream os;
      os << "cudaMalloc(" << bytes << " bytes) on " << device_name << ": out of memory";
      throw OutOfMemory(os.str());
    }
    SB_CUDA_CHECK(e);
    SB_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream));
    return p;
  };
  raw.release = [](void* p) {
    if (p != nullptr) SB_CUDA_CHECK(cudaFree(p));
  };
  return raw;
}
}  // namespace

CudaDevice::CudaDevice(int device_index) : index_(device_index) {
  SB_CUDA_CHECK(cudaSetDevice(index_));
  cudaDeviceProp prop{};
  SB_CUDA_CHECK(cudaGetDeviceProperties(&prop, index_));
  name_ = "cuda:" + std::to_string(index_) + " " + prop.name;
  const char* tf32 = std::getenv("SB_CUDA_ALLOW_TF32");
  allow_tf32_ = tf32 != nullptr && std::string(tf32) == "1";
  // Non-blocking: the legacy default stream must not serialise compute with NCCL's stream.
  SB_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  SB_CUBLAS_CHECK(cublas_api().create(&cublas_));
  SB_CUBLAS_CHECK(cublas_api().set_stream(cublas_, stream_));
  // Freed blocks are kept and handed out again, re-zeroed on the compute stream: in stream
  // order after their last user, and without cudaFree's device-wide synchronisation.
  cache_ = std::make_unique<CachingAllocator>(
      cuda_malloc_allocator(name_, stream_), [this](void* p, size_t bytes) {
        SB_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
      });
}

CudaDevice::~CudaDevice() {
  // No checks here: at process exit the driver may already be shutting down.
  cudaStreamSynchronize(stream_);
  for (auto& [id, e] : events_) cudaEventDestroy(e);
  for (auto& slot : operand_) slot.reset();  // into the workspace tracker, which must be alive
  cache_.reset();  // cudaFree of the cached blocks; live ones are their owners' (none by now)
  if (scratch_ != nullptr) cudaFree(scratch_);
  cublas_api().destroy(cublas_);
  cudaStreamDestroy(stream_);
}

RawAllocator CudaDevice::allocator() { return cache_->as_raw(); }

Device::MemoryInfo CudaDevice::memory_info() {
  MemoryInfo info;
  info.available = true;
  const CacheStats s = cache_->stats();
  info.reserved_bytes = s.reserved_bytes;
  info.peak_reserved_bytes = s.peak_reserved_bytes;
  size_t free = 0, total = 0;
  SB_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  info.driver_used_bytes = total - free;
  info.driver_total_bytes = total;
  return info;
}

void CudaDevice::trim_memory() {
  synchronize();
  cache_->empty_cache();
  cache_->reset_peak();
}

void CudaDevice::synchronize() { SB_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

uint64_t CudaDevice::record_event() {
  cudaEvent_t e = nullptr;
  SB_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  SB_CUDA_CHECK(cudaEventRecord(e, stream_));
  events_[next_event_] = e;
  return next_event_++;
}

void CudaDevice::wait_event(uint64_t event) {
  const auto it = events_.find(event);
  if (it == events_.end()) return;  // waited for already
  SB_CUDA_CHECK(cudaEventSynchronize(it->second));
  SB_CUDA_CHECK(cudaEventDestroy(it->second));
  events_.erase(it);
}

void CudaDevice::copy_to_device(void* dst, const void* src, size_t bytes) {
  SB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  SB_CUDA_CHECK(cudaStreamSynchronize(stream_));  // src may be a temporary of the caller
}
void CudaDevice::copy_to_host(void* dst, const void* src, size_t bytes) {
  SB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  SB_CUDA_CHECK(cudaStreamSynchronize(stream_));
}
void CudaDevice::copy(void* dst, const void* src, size_t bytes) {
  if (bytes) SB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}
void CudaDevice::fill_zero(void* dst, size_t bytes) {
  if (bytes) SB_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_));
}

float* CudaDevice::scratch(size_t floats) {
  if (floats > scratch_floats_) {
    if (scratch_ != nullptr) SB_CUDA_CHECK(cudaFree(scratch_));  // cudaFree waits for users
    SB_CUDA_CHECK(cudaMalloc(&scratch_, floats * sizeof(float)));
    scratch_floats_ = floats;
  }
  return scratch_;
}

bool CudaDevice::set_matmul_precision(MatmulPrecision p, MemoryTracker* workspace) {
  SB_CHECK(p == MatmulPrecision::kFp32 || workspace != nullptr,
           "bf16 matmuls need a tracker for their operand copies");
  for (auto& slot : operand_) slot.reset();  // counted in the previous tracker, released there
  matmul_ = p;
  workspace_ = p == MatmulPrecision::kBf16 ? workspace : nullptr;
  return true;
}

const uint16_t* CudaDevice::bf16_operand(int slot, const float* src, int rows, int cols, int ld,
                                         long long stride, int batch) {
  const size_t n = size_t(rows) * cols * batch;
  TrackedBuffer<uint16_t>& buf = operand_[slot];
  if (n == 0) return buf.data();
  if (n > buf.size()) {
    // Grown once per new largest operand; the old copy's users were queued on this stream
    // before the release, and the allocator hands memory out in stream order. Released first,
    // so the old and the new copy are never counted together.
    buf.reset();
    buf = TrackedBuffer<uint16_t>(*workspace_, MemCategory::kWorkspace, n);
  }
  if (ld == cols && (batch == 1 || stride == (long long)rows * cols)) {
    // Already packed (every linear layer's operands): the plain cast, no index arithmetic.
    f32_to_bf16_kernel<<<grid_for(n), kThreads, 0, stream_>>>(buf.data(), src, n);
  } else {
    auto* dst = reinterpret_cast<__nv_bfloat16*>(buf.data());
    strided_to_bf16_kernel<<<grid_for(n), kThreads, 0, stream_>>>(dst, src, rows, cols, ld,
                                                                  stride, batch);
  }
  SB_CUDA_CHECK_LAUNCH();
  return buf.data();
}

// ---- GEMM ---------------------------------------------------------------------------------------
// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands and m/n.
void CudaDevice::gemm_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                              const float* a, int lda, long long stride_a, const float* b,
                              int ldb, long long stride_b, float beta, float* c, int ldc,
                              long long stride_c, int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  if (matmul_ == MatmulPrecision::kBf16) {
    // op(A) is [m, k]: stored [m, k], or [k, m] when transposed; op(B) likewise [k, n]. The
    // packed copies have ld = their column count and batch stride = their size.
    const int ra = trans_a ? k : m, ca = trans_a ? m : k;
    const int rb = trans_b ? n : k, cb = trans_b ? k : n;
    const uint16_t* a16 = bf16_operand(0, a, ra, ca, lda, stride_a, batch);
    const uint16_t* b16 = bf16_operand(1, b, rb, cb, ldb, stride_b, batch);
    SB_CUBLAS_CHECK(cublas_api().gemm_strided_batched_ex(
        cublas_, op(trans_b), op(trans_a), n, m, k, &alpha, b16, CUDA_R_16BF, cb,
        (long long)rb * cb, a16, CUDA_R_16BF, ca, (long long)ra * ca, &beta, c, CUDA_R_32F, ldc,
        stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  cublasComputeType_t ct = allow_tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  if (batch == 1) {
    SB_CUBLAS_CHECK(cublas_api().gemm_ex(cublas_, op(trans_b), op(trans_a), n, m, k, &alpha, b,
                                 CUDA_R_32F, ldb, a, CUDA_R_32F, lda, &beta, c, CUDA_R_32F, ldc,
                                 ct, CUBLAS_GEMM_DEFAULT));
  } else {
    SB_CUBLAS_CHECK(cublas_api().gemm_strided_batched_ex(
        cublas_, op(trans_b), op(trans_a), n, m, k, &alpha, b, CUDA_R_32F, ldb, stride_b, a,
        CUDA_R_32F, lda, stride_a, &beta, c, CUDA_R_32F, ldc, stride_c, batch, ct,
        CUBLAS_GEMM_DEFAULT));
  }
}

void CudaDevice::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                      const float* a, int lda, const float* b, int ldb, float beta, float* c,
                      int ldc) {
  gemm_batched(trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

void CudaDevice::gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                           const uint16_t* a, int lda, const uint16_t* b, int ldb, float beta,
                           void* c, DType c_type, int ldc) {
  if (m == 0 || n == 0) return;
  cudaDataType_t ctype = c_type == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  SB_CUBLAS_CHECK(cublas_api().gemm_ex(cublas_, op(trans_b), op(trans_a), n, m, k, &alpha, b,
                               CUDA_R_16BF, ldb, a, CUDA_R_16BF, lda, &beta, c, ctype, ldc,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaDevice::linear_forward(float* out, const float* x, const float* w, const float* b,
                                int rows, int in, int out_features) {
  gemm(false, true, rows, out_features, in, 1.f, x, in, w, in, 0.f, out, out_features);
  if (b != nullptr && rows > 0 && out_features > 0) {
    size_t n = size_t(rows) * out_features;
    add_bias_kernel<<<grid_for(n), kThreads, 0, stream_>>>(out, b, rows, out_features);
    SB_CUDA_CHECK_LAUNCH();
  }
}

namespace {
// Chunks of rows for the two-pass column sums: enough blocks to fill the GPU, scratch bounded
// to about 1M floats per output even for vocabulary-wide columns.
int column_chunks(int rows, int C) {
  int by_rows = (rows + 63) / 64;
  int by_scratch = std::max(1, (1 << 20) / std::max(C, 1));
  return std::max(1, std::min({by_rows, by_scratch, 65535}));  // gridDim.y limit
}
}  // namespace

void CudaDevice::linear_backward(float* dx, float* dw, float* db, const float* dout,
                                 const float* x, const float* w, int rows, int in,
                                 int out_features) {
  // dx = dout W; dW += dout^T x.
  if (dx != nullptr)
    gemm(false, false, rows, in, out_features, 1.f, dout, out_features, w, in, 0.f, dx, in);
  gemm(true, false, out_features, in, rows, 1.f, dout, out_features, x, in, 1.f, dw, in);
  if (db != nullptr && rows > 0) {
    int chunks = column_chunks(rows, out_features);
    int per = (rows + chunks - 1) / chunks;
    float* part = scratch(size_t(chunks) * out_features);
    dim3 grid((out_features + kWarp - 1) / kWarp, chunks);
    col_partials_kernel<false><<<grid, dim3(kWarp, 8), 0, stream_>>>(
        part, nullptr, dout, nullptr, nullptr, nullptr, rows, out_features, per);
    SB_CUDA_CHECK_LAUNCH();
    col_finish_kernel<<<(out_features + kThreads - 1) / kThreads, kThreads, 0, stream_>>>(
        db, part, chunks, out_features);
    SB_CUDA_CHECK_LAUNCH();
  }
}

void CudaDevice::layernorm_forward(float* out, float* mean, float* rstd, const float* x,
                                   const float* w, const float* b, int rows, int C) {
  if (rows == 0) return;
  int rows_per_block = kThreads / kWarp;
  layernorm_forward_kernel<<<(rows + rows_per_block - 1) / rows_per_block, kThreads, 0,
                             stream_>>>(out, mean, rstd, x, w, b, rows, C);
  SB_CUDA_CHECK_LAUNCH();
}

void CudaDevice::layernorm_backward(float* dx, float* dw, float* db, const float* dout,
                                    const float* x, const float* w, const float* mean,
                                    const float* rstd, int rows, int C) {
  if (rows == 0) return;
  int rows_per_block = kThreads / kWarp;
  layernorm_backward_dx_kernel<<<(rows + rows_per_block - 1) / rows_per_block, kThreads, 0,
                                 stream_>>>(dx, dout, x, w, mean, rstd, rows, C);
  SB_CUDA_CHECK_LAUNCH();
  int chunks = column_chunks(rows, C);
  int per = (rows + chunks - 1) / chunks;
  float* part = scratch(2 * size_t(chunks) * C);
  float* part_b = part + size_t(chunks) * C;
  dim3 grid((C + kWarp - 1) / kWarp, chunks);
  col_partials_kernel<true><<<grid, dim3(kWarp, 8), 0, stream_>>>(part, part_b, dout, x, mean,
                                                                  rstd, rows, C, per);
  SB_CUDA_CHECK_LAUNCH();
  int g = (C + kThreads - 1) / kThreads;
  col_finish_kernel<<<g, kThreads, 0, stream_>>>(dw, part, chunks, C);
  col_finish_kernel<<<g, kThreads, 0, stream_>>>(db, part_b, chunks, C);
  SB_CUDA_CHECK_LAUNCH();
}

void CudaDevice::gelu_forward(float* out, const float* x, size_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n), kThreads, 0, stream_>>>(out, x, n);
  SB_CUDA_CHECK_LAUNCH();
}
void CudaDevice::gelu_backward(float* dx, const float* x, const float* dout, size_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n), kThreads, 0, stream_>>>(dx, x, dout, n);
  SB_CUDA_CHECK_LAUNCH();
}

// Per batch element, one strided-batched GEMM over heads: head h of q/k/v is the column block
// [h*hs, (h+1)*hs) of a [T, 3C] row-major matrix, so the batch stride is hs.
void CudaDevice::attention_forward(float* out, float* att, const float* qkv, int B, int T,
                                   int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.f / std::sqrt(float(hs));
  const long long TT = (long long)T * T;
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + size_t(b) * T * C3;
    // att[h] = scale * Q_h K_h^T   [T, T]
    gemm_batched(false, true, T, T, hs, scale, q, C3, hs, q + C, C3, hs, 0.f,
                 att + size_t(b) * NH * TT, T, TT, NH);
  }
  int nrows = B * NH * T, rows_per_block = kThreads / kWarp;
  causal_softmax_kernel<<<(nrows + rows_per_block - 1) / rows_per_block, kThreads, 0,
                          stream_>>>(att, nrows, T);
  SB_CUDA_CHECK_LAUNCH();
  for (int b = 0; b < B; ++b) {
    const float* v = qkv + size_t(b) * T * C3 + 2 * C;
    // out_h = att[h] V_h   [T, hs], written into columns [h*hs, (h+1)*hs) of out [T, C]
    gemm_batched(false, false, T, hs, T, 1.f, att + size_t(b) * NH * TT, T, TT, v, C3, hs, 0.f,
                 out + size_t(b) * T * C, C, hs, NH);
  }
}

void CudaDevice::attention_backward(float* dqkv, float* datt, const float* dout,
                                    const float* qkv, const float* att, int B, int T, int C,
                                    int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.f / std::sqrt(float(hs));
  const long long TT = (long long)T * T;
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + size_t(b) * T * C3;
    const float* a = att + size_t(b) * NH * TT;
    const float* d = dout + size_t(b) * T * C;
    float* dq = dqkv + size_t(b) * T * C3;
    // datt[h] = dout_h V_h^T;  dV_h = att[h]^T dout_h (=)
    gemm_batched(false, true, T, T, hs, 1.f, d, C, hs, q + 2 * C, C3, hs, 0.f,
                 datt + size_t(b) * NH * TT, T, TT, NH);
    gemm_batched(true, false, T, hs, T, 1.f, a, T, TT, d, C, hs, 0.f, dq + 2 * C, C3, hs, NH);
  }
  int nrows = B * NH * T, rows_per_block = kThreads / kWarp;
  causal_softmax_backward_kernel<<<(nrows + rows_per_block - 1) / rows_per_block, kThreads, 0,
                                   stream_>>>(datt, att, nrows, T);
  SB_CUDA_CHECK_LAUNCH();
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + size_t(b) * T * C3;
    const float* dp = datt + size_t(b) * NH * TT;
    float* dq = dqkv + size_t(b) * T * C3;
    // dQ_h = scale * dpre[h] K_h;  dK_h = scale * dpre[h]^T Q_h (=)
    gemm_batched(false, false, T, hs, T, scale, dp, T, TT, q + C, C3, hs, 0.f, dq, C3, hs, NH);
    gemm_batched(true, false, T, hs, T, scale, dp, T, TT, q, C3, hs, 0.f, dq + C, C3, hs, NH);
  }
}

// FlashAttention (flash_kernels.cuh): grid = (query or key tiles, heads, batch).
void CudaDevice::flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T,
                                         int C, int NH) {
  SB_CHECK(C / NH <= kFlashMaxHead, "fused attention on CUDA supports head size <= "
                                        << kFlashMaxHead << ", got " << C / NH);
  const dim3 grid((T + kFlashRows - 1) / kFlashRows, NH, B);
  flash_forward_kernel<<<grid, kFlashRows, 0, stream_>>>(out, lse, qkv, T, C, NH);
  SB_CUDA_CHECK_LAUNCH();
}

void CudaDevice::flash_attention_backward(float* dqkv, float* delta, const float* dout,
                                          const float* qkv, const float* out, const float* lse,
                                          int B, int T, int C, int NH) {
  SB_CHECK(C / NH <= kFlashMaxHead, "fused attention on CUDA supports head size <= "
                                        << kFlashMaxHead << ", got " << C / NH);
  const dim3 grid((T + kFlashRows - 1) / kFlashRows, NH, B);
  flash_delta_kernel<<<grid, kFlashRows, 0, stream_>>>(delta, dout, out, T, C, NH);
  SB_CUDA_CHECK_LAUNCH();
  flash_dkv_kernel<<<grid, kFlashRows, 0, stream_>>>(dqkv, dout, qkv, lse, delta, T, C, NH);
  SB_CUDA_CHECK_LAUNCH();
  flash_dq_kernel<<<grid, kFlashRows, 0, stream_>>>(dqkv, dout, qkv, lse, delta, T, C, NH);
  SB_CUDA_CHECK_LAUNCH();
}

void CudaDevice::embedding_forward(float* out, const int* tokens, const float* wte,
                                   const float* wpe, int B, int T, int C) {
  size_t n = size_t(B) * T * C;
  if (n == 0) return;
  embedding_forward_kernel<<<grid_for(n), kThreads, 0, stream_>>>(out, tokens, wte, wpe, B, T,
                                                                  C);
  SB_CUDA_CHECK_LAUNCH();
}

void CudaDevice::embedding_backward(float* dwte, float* dwpe, const float* dout,
                                    const int* tokens, int B, int T, int C) {
  size_t n = size_t(B) * T * C;
  if (n == 0) return;
  if (dwte != nullptr) {
    embedding_backward_wte_kernel<<<grid_for(n), kThreads, 0, stream_>>>(dwte, dout, tokens, B,
                                                                         T, C);
    SB_CUDA_CHECK_LAUNCH();
  }
  if (dwpe != nullptr) {
    size_t m = size_t(T) * C;
    embedding_backward_wpe_kernel<<<grid_for(m), kThreads, 0, stream_>>>(dwpe, dout, B, T, C);
    SB_CUDA_CHECK_LAUNCH();
  }
}

float CudaDevice::softmax_crossentropy_forward(float* probs, const float* logits,
                                               const int* targets, int rows, int V) {
  if (rows == 0) return 0.f;
  float* row_loss = scratch(size_t(rows) + 1);
  softmax_xent_kernel<<<rows, 1024, 0, stream_>>>(probs, row_loss, logits, targets, V);
  SB_CUDA_CHECK_LAUNCH();
  mean_kernel<<<1, 1024, 0, stream_>>>(row_loss + rows, row_loss, rows);
  SB_CUDA_CHECK_LAUNCH();
  float loss = 0.f;
  copy_to_host(&loss, row_loss + rows, sizeof(float));
  return loss;
}

void CudaDevice::crossentropy_backward(float* dlogits, const float* probs, const int* targets,
                                       int rows, int V, float scale) {
  size_t n = size_t(rows) * V;
  if (n == 0) return;
  xent_backward_kernel<<<grid_for(n), kThreads, 0, stream_>>>(dlogits, probs, targets, rows, V,
                                                              scale);
  SB_CUDA_CHECK_LAUNCH();
}

void CudaDevice::add_inplace(float* y, const float* x, size_t n) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, stream_>>>(y, x, n);
  SB_CUDA_CHECK_LAUNCH();
}
void CudaDevice::scale_inplace(float* y, float s, size_t n) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, stream_>>>(y, s, n);
  SB_CUDA_CHECK_LAUNCH();
}

void CudaDevice::adamw(float* p, const float* g, float* m, float* v, size_t n, float lr,
                       float beta1, float beta2, float eps, float weight_decay, int step,
                       float grad_scale) {
  SB_CHECK(step >= 1, "AdamW step counts from 1, got " << step);
  if (n == 0) return;
  // Bias corrections on the host, once per call (Kingma & Ba 2015, Algorithm 1).
  float bc1 = 1.f - std::pow(beta1, float(step)), bc2 = 1.f - std::pow(beta2, float(step));
  adamw_kernel<<<grid_for(n), kThreads, 0, stream_>>>(p, g, m, v, n, lr, beta1, beta2, eps,
                                                      weight_decay, bc1, bc2, grad_scale);
  SB_CUDA_CHECK_LAUNCH();
}

void CudaDevice::bf16_to_f32(float* dst, const uint16_t* src, size_t n) {
  if (n == 0) return;
  bf16_to_f32_kernel<<<grid_for(n), kThreads, 0, stream_>>>(dst, src, n);
  SB_CUDA_CHECK_LAUNCH();
}
void CudaDevice::f32_to_bf16(uint16_t* dst, const float* src, size_t n) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<grid_for(n), kThreads, 0, stream_>>>(dst, src, n);
  SB_CUDA_CHECK_LAUNCH();
}

cudaStream_t cuda_compute_stream(Device& device) {
  auto* cuda = dynamic_cast<CudaDevice*>(&device);
  return cuda != nullptr ? cuda->stream() : nullptr;
}

std::unique_ptr<Device> make_cuda_device(int local_rank, std::string* why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return nullptr;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device visible";
    return nullptr;
  }
  // One GPU per local rank; with one visible GPU per rank (srun --gpus-per-task) index 0.
  return std::make_unique<CudaDevice>(local_rank % count);
}

}  // namespace sb
