// The simulated device (see header): every kernel is a cost on the logical clock, every
// allocation an address from a bump counter that no one may dereference.
#include "harness/predict/sim_device.h"

#include <algorithm>
#include <unordered_map>

#include "harness/common/check.h"
#include "harness/predict/model_shape.h"

namespace sb {
namespace {

// Addresses handed out: far above anything mapped, never dereferenced (holds_data() false).
constexpr uint64_t kSimBase = uint64_t(1) << 44;

constexpr uint64_t kMinBlock = 512, kSmallSize = 1 << 20, kSmallBuffer = 2 << 20,
                   kMinLargeAlloc = 10 << 20, kLargeBuffer = 20 << 20, kRoundLarge = 2 << 20;

uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

class SimDevice final : public Device {
 public:
  SimDevice(const Cluster& c, int world, SimClock& clock, const GptConfig* model, int batch,
            AllocatorModel* allocations)
      : cluster_(c), clock_(clock), slow_(c.compute_slowdown(world)),
        operand_bytes_(model && c.bf16_matmul ? bf16_operand_bytes(*model, batch) : 0),
        allocations_(allocations) {}

  std::string name() const override { return "sim:" + cluster_.name; }
  bool is_host() const override { return cluster_.host_cores > 0; }
  bool holds_data() const override { return false; }
  double now_s() const override { return clock_.compute_s; }
  RawAllocator allocator() override {
    return RawAllocator{[this](size_t bytes) {
                          // The CPU device's cache zero-fills every block it hands out again
                          // (RawAllocator's contract), as a steady step's blocks all are.
                          if (is_host()) memory(double(bytes), kCopy);
                          const uint64_t at = next_;
                          next_ += (std::max<uint64_t>(bytes, 1) + 255) / 256 * 256;
                          if (allocations_ != nullptr) {
                            sizes_[at] = bytes;
                            allocations_->add(bytes, +1);
                          }
                          return reinterpret_cast<void*>(at);
                        },
                        [this](void* p) {
                          auto it = sizes_.find(reinterpret_cast<uint64_t>(p));
                          if (it == sizes_.end()) return;
                          allocations_->add(it->second, -1);
                          sizes_.erase(it);
                        }};
  }
  void copy_to_device(void*, const void*, size_t bytes) override { memory(bytes, kCopy); }
  void copy_to_host(void*, const void*, size_t bytes) override { memory(bytes, kCopy); }
  void copy(void*, const void*, size_t bytes) override { memory(2.0 * double(bytes), kCopy); }
  void fill_zero(void*, size_t bytes) override { memory(bytes, kCopy); }

  // bf16 matmuls on a GPU cluster hold the CUDA device's two operand slots, at their size
  // after the first step (bf16_operand_bytes, checked against the CUDA device in its tests).
  bool set_matmul_precision(MatmulPrecision p, MemoryTracker* workspace) override {
    operands_.reset();
    bf16_ = p == MatmulPrecision::kBf16;
    if (bf16_ && cluster_.bf16_matmul && operand_bytes_ > 0)
      // The stack's cuBLAS calls read bf16 tensors: no operand copies (Held::kNone).
      operands_ = TrackedBuffer<uint8_t>(*workspace, MemCategory::kWorkspace, operand_bytes_,
                                         Held::kNone);
    return !bf16_ || cluster_.bf16_matmul;
  }

  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float, const float*, int,
            const float*, int, float, float*, int) override {
    matmul(m, n, k, trans_a, trans_b);
  }
  // y = x W^T: rows x out over in; backward dx = dy W (rows x in over out) and
  // dW = dy^T x (out x in over rows).
  void linear_forward(float*, const float*, const float*, const float*, int rows, int in,
                      int out) override {
    matmul(rows, out, in, false, true);
  }
  void linear_backward(float* dx, float*, float*, const float*, const float*, const float*,
                       int rows, int in, int out) override {
    if (dx != nullptr) matmul(rows, in, out, false, false);
    matmul(out, in, rows, true, false);
  }
  void layernorm_forward(float*, float*, float*, const float*, const float*, const float*,
                         int rows, int C) override {
    memory(8.0 * rows * C, kNorm);
  }
  void layernorm_backward(float*, float*, float*, const float*, const float*, const float*,
                          const float*, const float*, int rows, int C) override {
    memory(16.0 * rows * C, kNorm);
  }
  void gelu_forward(float*, const float*, size_t n) override { memory(8.0 * double(n)); }
  void gelu_backward(float*, const float*, const float*, size_t n) override {
    memory(12.0 * double(n));
  }
  // Scores and values, forward 2·2·B·T²·C, backward twice that (PaLM appendix B's 12·L·C·T
  // per token over both passes): per head, Q K^T is T x T over hd and P V is T x hd over T.
  void attention_forward(float*, float*, const float*, int B, int T, int C, int NH) override {
    const double rows = double(B) * NH * T, hd = double(C) / NH;
    attention(gemm_seconds(cluster_, bf16_, rows, T, hd, sms()) +
                  gemm_seconds(cluster_, bf16_, rows, hd, T, sms()),
              gemm_seconds(cluster_, bf16_, rows, T, hd, contended_sms()) +
                  gemm_seconds(cluster_, bf16_, rows, hd, T, contended_sms()));
  }
  void attention_backward(float*, float*, const float*, const float*, const float*, int B, int T,
                          int C, int NH) override {
    const double rows = double(B) * NH * T, hd = double(C) / NH;
    attention(2 * (gemm_seconds(cluster_, bf16_, rows, T, hd, sms()) +
                   gemm_seconds(cluster_, bf16_, rows, hd, T, sms())),
              2 * (gemm_seconds(cluster_, bf16_, rows, T, hd, contended_sms()) +
                   gemm_seconds(cluster_, bf16_, rows, hd, T, contended_sms())));
  }
  // Fused: the same model FLOPs forward; backward recomputes the scores (one more T²·C
  // product: FlashAttention-2 §3.1.2's 5 matmuls against 4), so 2.5x the forward.
  void flash_attention_forward(float*, float*, const float*, int B, int T, int C,
                               int) override {
    const double t = flash_seconds(cluster_, bf16_, 4.0 * B * double(T) * T * C, false);
    attention(t, t * sm_share());
  }
  void flash_attention_backward(float*, float*, const float*, const float*, const float*,
                                const float*, int B, int T, int C, int) override {
    const double t = flash_seconds(cluster_, bf16_, 10.0 * B * double(T) * T * C, true);
    attention(t, t * sm_share());
  }
  // The Llama block's elementwise kernels: bytes read and written once, fp32.
  void rmsnorm_forward(float*, float*, const float*, const float*, int rows, int C) override {
    memory(8.0 * rows * C, kNorm);
  }
  void rmsnorm_backward(float*, float*, const float*, const float*, const float*, const float*,
                        int rows, int C) override {
    memory(16.0 * rows * C, kNorm);
  }
  void swiglu_forward(float*, const float*, int rows, int F) override { memory(12.0 * rows * F); }
  void swiglu_backward(float*, const float*, const float*, int rows, int F) override {
    memory(20.0 * rows * F);
  }
  void rope_gqa_forward(float*, const float*, int B, int T, int H, int KV, int hd,
                        float) override {
    memory(4.0 * B * T * hd * (H + 2.0 * KV + 3.0 * H));
  }
  void rope_gqa_backward(float*, const float*, int B, int T, int H, int KV, int hd,
                         float) override {
    memory(4.0 * B * T * hd * (H + 2.0 * KV + 3.0 * H));
  }
  void embedding_forward(float*, const int*, const float*, const float*, int B, int T,
                         int C) override {
    memory(12.0 * B * T * C);
  }
  void embedding_backward(float*, float*, const float*, const int*, int B, int T,
                          int C) override {
    memory(12.0 * B * T * C);
  }
  float softmax_crossentropy_forward(float*, const float*, const int*, int rows, int V) override {
    memory(8.0 * rows * double(V));
    return 0.0f;  // no data: the dry run has no loss
  }
  void crossentropy_backward(float*, const float*, const int*, int rows, int V, float) override {
    memory(8.0 * rows * double(V));
  }
  void add_inplace(float*, const float*, size_t n) override { memory(12.0 * double(n)); }
  void scale_inplace(float*, float, size_t n) override { memory(8.0 * double(n)); }
  void adamw(float*, const float*, float*, float*, size_t n, float, float, float, float, float,
             int, float) override {
    memory(28.0 * double(n), kOptimizer);  // read p, g, m, v; write p, m, v
  }
  void bf16_to_f32(float*, const uint16_t*, size_t n) override {
    memory(6.0 * double(n), kCopy);
  }
  void f32_to_bf16(uint16_t*, const float*, size_t n) override {
    memory(6.0 * double(n), kCopy);
  }
  // ZeRO++'s quantiser runs on the rank's own thread, between its collectives: a kernel of the
  // compute stream. Values as the bf16-mixed step holds them (bf16 on a GPU, fp32 on a CPU).
  void quantizer_pass(QuantPass pass, uint64_t elements) override {
    const double t = quantizer_seconds(cluster_, pass, double(elements),
                                       cluster_.bf16_matmul ? 2.0 : 4.0);
    if (t > 0) advance(KernelClass::kQuantize, t, t);
  }

 private:
  static constexpr KernelClass kNorm = KernelClass::kNorm, kCopy = KernelClass::kCopy,
                               kOptimizer = KernelClass::kOptimizer;

  // One kernel: `alone` seconds on the whole device, `contended` on what a collective in flight
  // leaves; the part of it that overlaps the comm streams' busy time runs at the contended
  // rate. At least one launch (but copies); slowed by oversubscription.
  void advance(KernelClass k, double alone, double contended) {
    const double start = clock_.compute_s;
    double t = alone;
    const double beside = clock_.comm_idle_s() - start;  // comm busy after this kernel starts
    if (!clock_.serial && contended > alone && beside > 0)
      t = beside >= contended ? contended : beside + (1 - beside / contended) * alone;
    // Copies are the strategies' layout bookkeeping (per-rank chunks of a gathered buffer),
    // which PyTorch and DeepSpeed fold into views of the collective's buffer: no launch floor.
    const double floor = k == kCopy ? 0.0 : std::max(0.0, cluster_.kernels.launch_s - t);
    clock_.class_s[int(k)] += alone * slow_;
    clock_.contention_s += (t - alone) * slow_;
    clock_.launch_s += floor * slow_;
    t = (t + floor) * slow_;
    // Where communication takes the compute's cores, a kernel gets what the collectives' CPU
    // work leaves of them.
    clock_.compute_s = clock_.serial ? clock_.serial_kernel_end(start, t) : start + t;
    clock_.busy_s += t;
  }
  int sms() const { return cluster_.kernels.sm_count; }
  int contended_sms() const {
    return std::max(1, cluster_.kernels.sm_count - cluster_.kernels.comm_sms);
  }
  // A kernel that fills the device runs at the share of SMs a collective leaves it.
  double sm_share() const {
    return sms() > 0 ? double(sms()) / contended_sms() : 1.0;
  }
  void matmul(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b) {
    ++clock_.gemm_calls[GemmCall{trans_a, trans_b, m, n, k}];
    advance(KernelClass::kGemm, gemm_seconds(cluster_, bf16_, m, n, k, sms()),
            gemm_seconds(cluster_, bf16_, m, n, k, contended_sms()));
  }
  void attention(double alone, double contended) {
    advance(KernelClass::kAttention, alone, contended);
  }
  void memory(double bytes, KernelClass k = KernelClass::kElementwise) {
    const double t = memory_seconds(cluster_, bytes);
    if (t <= 0 && (cluster_.kernels.launch_s <= 0 || k == kCopy)) return;  // no cost, no wait
    advance(k, t, t);
  }

  const Cluster& cluster_;
  SimClock& clock_;
  double slow_;
  uint64_t operand_bytes_;
  AllocatorModel* allocations_;
  std::unordered_map<uint64_t, uint64_t> sizes_;  // live allocations (with allocations_)
  bool bf16_ = false;
  uint64_t next_ = kSimBase;
  TrackedBuffer<uint8_t> operands_;
};

}  // namespace

void AllocatorModel::add(uint64_t bytes, int sign) {
  const uint64_t r = round_up(std::max<uint64_t>(bytes, 1), kMinBlock);
  uint64_t& cls = r <= kSmallSize ? small : r <= kMinLargeAlloc ? mid : large;
  const uint64_t counted = r > kMinLargeAlloc ? round_up(r, kRoundLarge) : r;
  if (sign > 0) {
    live += bytes;
    cls += counted;
  } else {
    live -= bytes;
    cls -= counted;
  }
  peak_live = std::max(peak_live, live);
  peak_reserved = std::max(peak_reserved, reserved());
}

uint64_t AllocatorModel::reserved() const {
  return round_up(small, kSmallBuffer) + round_up(mid, kLargeBuffer) + large;
}

std::unique_ptr<Device> make_sim_device(const Cluster& cluster, int world, SimClock& clock,
                                        const GptConfig* model, int batch_per_rank,
                                        AllocatorModel* allocations) {
  return std::make_unique<SimDevice>(cluster, world, clock, model, batch_per_rank, allocations);
}

}  // namespace sb
