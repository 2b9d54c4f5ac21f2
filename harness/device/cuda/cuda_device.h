// The CUDA Device: cuBLAS GEMMs and simple, correct kernels on one compute stream, with the
// same semantics as the CPU device (row-major, = / += as documented in device.h). It owns the
// stream, the cuBLAS handle and small scratch; it never communicates (the NCCL backend only
// borrows stream() to order collectives after compute).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>

#include "harness/common/dtype.h"
#include "harness/device/device.h"
#include "harness/memory/caching_allocator.h"

namespace sb {

class CudaDevice : public Device {
 public:
  explicit CudaDevice(int device_index);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  int device_index() const { return index_; }
  cudaStream_t stream() const { return stream_; }
  // fp32 GEMMs may run on TF32 tensor cores (PyTorch's allow_tf32). Default: the environment
  // variable SB_CUDA_ALLOW_TF32=1, else off, so fp32 runs match the CPU device closely.
  void set_allow_tf32(bool allow) { allow_tf32_ = allow; }
  bool allow_tf32() const { return allow_tf32_; }

  // C = alpha op(A) op(B) + beta C with bf16 A, B, fp32 accumulation, and C stored as fp32
  // or bf16 (c_type). Row-major, as gemm().
  void gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                 const uint16_t* a, int lda, const uint16_t* b, int ldb, float beta, void* c,
                 DType c_type, int ldc);

  std::string name() const override { return name_; }
  bool is_host() const override { return false; }
  RawAllocator allocator() override;  // through the caching allocator
  MemoryInfo memory_info() override;
  void trim_memory() override;
  void reset_memory_peak() override { cache_->reset_peak(); }
  CacheStats allocator_stats() const override { return cache_->stats(); }
  const CachingAllocator& cache() const { return *cache_; }
  void synchronize() override;
  uint64_t record_event() override;
  void wait_event(uint64_t event) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  // kBf16: every matmul casts its operands into two counted bf16 slots (grown, never shrunk,
  // until kFp32) and runs on tensor cores with fp32 accumulation and fp32 results.
  bool set_matmul_precision(MatmulPrecision p, MemoryTracker* workspace) override;
  // Elements each operand slot holds now (slot 0: op(A) operands, 1: op(B)).
  size_t operand_slot_elements(int slot) const { return operand_[slot].size(); }

  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            int lda, const float* b, int ldb, float beta, float* c, int ldc) override;
  void linear_forward(float* out, const float* x, const float* w, const float* b, int rows,
                      int in, int out_features) override;
  void linear_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                       const float* w, int rows, int in, int out_features) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                         const float* b, int rows, int C) override;
  void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                          const float* w, const float* mean, const float* rstd, int rows,
                          int C) override;
  void gelu_forward(float* out, const float* x, size_t n) override;
  void gelu_backward(float* dx, const float* x, const float* dout, size_t n) override;
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C,
                         int NH) override;
  void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH) override;
  void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                               int NH) override;
  void flash_attention_backward(float* dqkv, float* delta, const float* dout, const float* qkv,
                                const float* out, const float* lse, int B, int T, int C,
                                int NH) override;
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int rows,
                       int C) override;
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                        const float* rstd, int rows, int C) override;
  void swiglu_forward(float* out, const float* h, int rows, int F) override;
  void swiglu_backward(float* dh, const float* h, const float* dout, int rows, int F) override;
  void rope_gqa_forward(float* qkv, const float* qkv_raw, int B, int T, int H, int KV, int hd,
                        float theta) override;
  void rope_gqa_backward(float* dqkv_raw, const float* dqkv, int B, int T, int H, int KV,
                         int hd, float theta) override;
  void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe,
                         int B, int T, int C) override;
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens,
                          int B, int T, int C) override;
  float softmax_crossentropy_forward(float* probs, const float* logits, const int* targets,
                                     int rows, int V) override;
  void crossentropy_backward(float* dlogits, const float* probs, const int* targets, int rows,
                             int V, float scale) override;
  void add_inplace(float* y, const float* x, size_t n) override;
  void scale_inplace(float* y, float s, size_t n) override;
  void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
             float beta2, float eps, float weight_decay, int step, float grad_scale) override;
  void bf16_to_f32(float* dst, const uint16_t* src, size_t n) override;
  void f32_to_bf16(uint16_t* dst, const float* src, size_t n) override;

 private:
  // Row-major strided-batched GEMM over cuBLAS (column-major): C^T = op(B)^T op(A)^T.
  void gemm_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                    const float* a, int lda, long long stride_a, const float* b, int ldb,
                    long long stride_b, float beta, float* c, int ldc, long long stride_c,
                    int batch);
  float* scratch(size_t floats);  // grows; untracked, at most a few MB
  // In bf16 matmul mode: a packed bf16 copy of a batch of strided [rows, cols] fp32 matrices
  // in operand slot `slot`, cast on the compute stream.
  const uint16_t* bf16_operand(int slot, const float* src, int rows, int cols, int ld,
                               long long stride, int batch);

  int index_ = 0;
  std::string name_;
  bool allow_tf32_ = false;
  cudaStream_t stream_ = nullptr;
  std::map<uint64_t, cudaEvent_t> events_;  // recorded, not yet waited for
  uint64_t next_event_ = 1;
  cublasHandle_t cublas_ = nullptr;
  float* scratch_ = nullptr;
  size_t scratch_floats_ = 0;
  // Declared before the operand slots: the slots' blocks go back into the cache first.
  std::unique_ptr<CachingAllocator> cache_;
  MatmulPrecision matmul_ = MatmulPrecision::kFp32;
  MemoryTracker* workspace_ = nullptr;
  TrackedBuffer<uint16_t> operand_[2];
};

// The compute stream of a CUDA device (the NCCL backend orders collectives after it); the
// legacy default stream (null) for any other device.
cudaStream_t cuda_compute_stream(Device& device);

}  // namespace sb
