// CpuDevice: the Device kernels on the host, every matmul through OpenBLAS cblas_sgemm (one
// BLAS thread per rank: ranks are the parallelism) and the rest as tight loops that -O3
// vectorises. Memory is host memory through a caching allocator (as the CUDA device's): a
// step reuses the blocks of the step before, so a steady-state step neither maps nor faults.
#pragma once

#include <memory>

#include "harness/device/device.h"

namespace sb {

class CpuDevice : public Device {  // not final: the CUDA tests derive a bf16-matmul reference
 public:
  CpuDevice();
  std::string name() const override { return "cpu-openblas"; }
  bool is_host() const override { return true; }
  RawAllocator allocator() override { return cache_->as_raw(); }
  // Cached blocks go back to the OS between strategies (each starts from empty pools); the
  // peak and the counters are the caching allocator's.
  void trim_memory() override { cache_->empty_cache(); }
  void reset_memory_peak() override { cache_->reset_peak(); }
  CacheStats allocator_stats() const override { return cache_->stats(); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;

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
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B,
                          int T, int C) override;
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
  std::unique_ptr<CachingAllocator> cache_;
};

// Debian's OpenBLAS 0.3.21 maps AVX-512 AMD CPUs (Zen 4) to its Haswell (AVX2) kernels; its
// SkylakeX kernels run ~1.8x faster there. OpenBLAS reads OPENBLAS_CORETYPE when it loads, so
// on an AVX-512 CPU with the variable unset this sets it and re-executes the program (same
// pid, so mpirun and srun still track it). Call first thing in main. SB_KEEP_BLAS_CORETYPE=1
// keeps OpenBLAS's own choice.
void select_blas_kernels(char** argv);

}  // namespace sb
