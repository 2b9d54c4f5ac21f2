// Device: the compute kernels of the workload behind one interface (CPU with OpenBLAS; CUDA
// with cuBLAS and kernels). Pointers are device memory of this device; shapes are row-major.
// It owns no model state and never communicates.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "harness/memory/caching_allocator.h"
#include "harness/memory/tracker.h"

namespace sb {

// How a device's matmuls (gemm, linear layers, attention's scores and values) take their
// operands. kBf16 is PyTorch autocast's bf16 matmul: operands rounded to bf16, products
// accumulated in fp32, results stored in fp32 (tensor cores on a GPU).
enum class MatmulPrecision { kFp32, kBf16 };
inline const char* matmul_precision_name(MatmulPrecision p) {
  return p == MatmulPrecision::kBf16 ? "bf16" : "fp32";
}

// One pass of ZeRO++'s block quantiser (strategies/quantize.h): float values to codes and block
// scales, or codes and scales back to floats; qwZ's int8 codes, or qgZ's packed int4 codes
// (quantised partitions, and dequantised partitions summed), each its own host loop.
enum class QuantPass { kQuantize, kDequantize, kQuantizeInt4, kDequantizeInt4Sum };

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;       // "cpu-openblas", "cuda:0 NVIDIA H200"
  virtual bool is_host() const = 0;
  virtual RawAllocator allocator() = 0;       // zero-filled allocations of this device
  virtual void synchronize() {}
  // A marker of the work issued to this device so far (torch.cuda.Event().record()) and a host
  // wait for it (event.synchronize()). A device that runs each call before returning has
  // finished it at record time: 0 and a no-op.
  virtual uint64_t record_event() { return 0; }
  virtual void wait_event(uint64_t event) {}
  // False for the predictor's simulated device: its allocations are sizes only (no memory
  // behind them) and its kernels touch no data, so nothing may be read or initialised.
  virtual bool holds_data() const { return true; }
  // Seconds on this device's clock: the wall clock for a real device (read after
  // synchronize()), the logical clock that a simulated device's kernels advance.
  virtual double now_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // device to device
  virtual void fill_zero(void* dst, size_t bytes) = 0;

  // Device memory as the device's allocator and driver see it; available only on a GPU.
  struct MemoryInfo {
    bool available = false;
    uint64_t reserved_bytes = 0;       // held by the caching allocator: live + cached blocks
    uint64_t peak_reserved_bytes = 0;  // since the last trim_memory()
    uint64_t driver_used_bytes = 0;    // cudaMemGetInfo total - free: the whole GPU, so also
                                       // NCCL's and cuBLAS's workspaces and the CUDA context
    uint64_t driver_total_bytes = 0;
  };
  virtual MemoryInfo memory_info() { return {}; }
  // Returns cached free blocks to the driver and restarts the reserved peak: between runs, so
  // each strategy is measured from a clean device.
  virtual void trim_memory() {}
  virtual void reset_memory_peak() {}  // peak_reserved_bytes := reserved_bytes
  // The counters of the caching allocator behind allocator() (CPU and CUDA: every tracked
  // buffer comes from it); zeros for a device without one (the predictor's).
  virtual CacheStats allocator_stats() const { return {}; }

  // Switches the matmul precision; returns whether the device honours it (a device without a
  // bf16 matmul stays fp32 and returns false for kBf16). bf16 operand copies are counted as
  // kWorkspace in `workspace` until the precision is set back to kFp32, which releases them:
  // the tracker must outlive that call.
  virtual bool set_matmul_precision(MatmulPrecision p, MemoryTracker* workspace) {
    (void)workspace;
    return p == MatmulPrecision::kFp32;
  }

  // C[m,n] = alpha * op(A) * op(B) + beta * C, row-major, op = transpose when trans_*.
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                    const float* a, int lda, const float* b, int ldb, float beta, float* c,
                    int ldc) = 0;

  // out = x W^T + b for x [rows, in], W [out, in] (bias may be null).
  virtual void linear_forward(float* out, const float* x, const float* w, const float* b,
                              int rows, int in, int out_features) = 0;
  // dx (=, may be null), dW (+=), db (+=, may be null) from dout [rows, out].
  virtual void linear_backward(float* dx, float* dw, float* db, const float* dout,
                               const float* x, const float* w, int rows, int in,
                               int out_features) = 0;
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* x,
                                 const float* w, const float* b, int rows, int C) = 0;
  // dx (+=), dw (+=), db (+=).
  virtual void layernorm_backward(float* dx, float* dw, float* db, const float* dout,
                                  const float* x, const float* w, const float* mean,
                                  const float* rstd, int rows, int C) = 0;
  virtual void gelu_forward(float* out, const float* x, size_t n) = 0;        // tanh approx
  virtual void gelu_backward(float* dx, const float* x, const float* dout, size_t n) = 0;  // =
  // Causal multi-head attention from qkv [B, T, 3C] to out [B, T, C]; att [B, NH, T, T] keeps
  // the softmax probabilities for backward (preatt scratch of the same size may be used).
  virtual void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C,
                                 int NH) = 0;
  // dqkv (=) from dout; datt is scratch of att's size.
  virtual void attention_backward(float* dqkv, float* datt, const float* dout,
                                  const float* qkv, const float* att, int B, int T, int C,
                                  int NH) = 0;
  // The same attention, fused (FlashAttention, Dao et al. 2022, Alg. 1): query tiles against
  // key tiles with an online softmax; lse [B, NH, T] keeps each query row's log-sum-exp of its
  // scaled scores, the only thing saved besides out. No T×T buffer exists at any time.
  virtual void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T,
                                       int C, int NH) = 0;
  // dqkv (=) from dout, recomputing the probabilities as exp(score - lse) tile by tile
  // (Alg. 2); delta [B, NH, T] is scratch for rowsum(dout * out) (FlashAttention-2's D).
  virtual void flash_attention_backward(float* dqkv, float* delta, const float* dout,
                                        const float* qkv, const float* out, const float* lse,
                                        int B, int T, int C, int NH) = 0;
  // The Llama block's kernels (llama.cc). RMSNorm (Zhang & Sennrich 2019), eps 1e-5 as Llama:
  // out = x * rstd * w with rstd [rows] = 1 / sqrt(mean(x^2) + eps), kept for backward.
  virtual void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w,
                               int rows, int C) = 0;
  // dx (+=), dw (+=).
  virtual void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x,
                                const float* w, const float* rstd, int rows, int C) = 0;
  // SwiGLU (Shazeer 2020): out [rows, F] = silu(h[:, :F]) * h[:, F:] for h [rows, 2F] (gate,
  // then up: Llama's w1 and w3 stacked).
  virtual void swiglu_forward(float* out, const float* h, int rows, int F) = 0;
  virtual void swiglu_backward(float* dh, const float* h, const float* dout, int rows,
                               int F) = 0;  // dh (=) [rows, 2F]
  // From qkv_raw [B, T, (H + 2·KV)·hd] (H query heads, KV key heads, KV value heads) to qkv
  // [B, T, 3·H·hd], the layout attention_forward takes: q and k rotated by their position t
  // (RoPE, Su et al. 2021, in Meta's convention: pairs (2i, 2i+1) turned by t·theta^(-2i/hd)),
  // K/V head h / (H/KV) repeated for query head h (grouped-query attention; Meta's repeat_kv).
  virtual void rope_gqa_forward(float* qkv, const float* qkv_raw, int B, int T, int H, int KV,
                                int hd, float theta) = 0;
  // dqkv_raw (=) from dqkv: the inverse rotation, each K/V head summed over its query group.
  virtual void rope_gqa_backward(float* dqkv_raw, const float* dqkv, int B, int T, int H,
                                 int KV, int hd, float theta) = 0;
  // out[b,t,:] = wte[tok] + wpe[t] (wpe null: no learned positions, the Llama block)
  virtual void embedding_forward(float* out, const int* tokens, const float* wte,
                                 const float* wpe, int B, int T, int C) = 0;
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout,
                                  const int* tokens, int B, int T,
                                  int C) = 0;  // +=; dwpe may be null
  // probs [rows, V] = softmax(logits); returns the mean loss over rows (host value).
  virtual float softmax_crossentropy_forward(float* probs, const float* logits,
                                             const int* targets, int rows, int V) = 0;
  // dlogits (=) = (probs - onehot) * scale
  virtual void crossentropy_backward(float* dlogits, const float* probs, const int* targets,
                                     int rows, int V, float scale) = 0;
  virtual void add_inplace(float* y, const float* x, size_t n) = 0;           // y += x
  virtual void scale_inplace(float* y, float s, size_t n) = 0;

  // AdamW with bias correction (Loshchilov & Hutter 2019), decoupled decay lr*wd*p.
  // grad is pre-multiplied by grad_scale (e.g. 1/world for averaging).
  virtual void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, int step,
                     float grad_scale) = 0;
  virtual void bf16_to_f32(float* dst, const uint16_t* src, size_t n) = 0;
  virtual void f32_to_bf16(uint16_t* dst, const float* src, size_t n) = 0;

  // The quantiser is host arithmetic over the data a device holds (strategies/quantize.cc), so
  // a real device's wall clock has already run it. A device that holds no data (the
  // predictor's) never runs that loop: the strategy reports each pass over `elements` values
  // here instead, so the simulated clock can charge what the loop would have cost.
  virtual void quantizer_pass(QuantPass pass, uint64_t elements) {}
};

std::unique_ptr<Device> make_cpu_device();
// Null when the build has no CUDA or no GPU is visible; `why` says which.
std::unique_ptr<Device> make_cuda_device(int local_rank, std::string* why);

}  // namespace sb
