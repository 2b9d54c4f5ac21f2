// Tracked allocator: every buffer of a run is allocated here with a category, so the suite
// knows current and peak bytes per category and the breakdown at the moment of the peak.
// It does not decide what to allocate (strategies do); an optional per-rank limit turns an
// allocation past it into OutOfMemory, which is how "oom" is reported.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

namespace sb {

enum class MemCategory : int {
  kParams,          // parameters at rest (full or shard), as stored (fp32 or bf16)
  kGatheredParams,  // unsharded parameters materialised for compute
  kGrads,           // gradients (full or shard), as stored
  kOptimizer,       // Adam m, v (and the fp32 master copy in bf16-mixed)
  kActivations,     // forward activations kept for backward, and their gradients
  kCommBuffers,     // staging buffers of collectives (buckets, gathered grads)
  kWorkspace,       // scratch: fp32 compute copies of bf16 tensors, temporaries
  kSecondaryParams, // ZeRO++ hpZ: the node-local secondary partition of each gathered parameter
};
constexpr int kNumMemCategories = 8;
const char* category_name(MemCategory c);
using MemBreakdown = std::array<uint64_t, kNumMemCategories>;

// What a bf16-mixed PyTorch or DeepSpeed step holds for a buffer this implementation keeps:
// the model computes in fp32 and keeps fp32 work beside its bf16 storage, where the stacks run
// bf16 kernels on bf16 tensors (autocast: torch/amp/autocast_mode.py; FSDP MixedPrecision
// param_dtype=bf16: torch/distributed/fsdp/_flat_param.py FlatParamHandle._use_low_precision_shard
// gathers bf16 params, so every activation is bf16; DeepSpeed bf16: runtime/bf16_optimizer.py
// BF16_Optimizer, zero/stage_1_and_2.py single_partition_of_fp32_groups and zero/stage3.py
// _create_fp32_partitions keep bf16 params and grads, the fp32 master only in the optimizer).
// The tracker counts both ledgers: the bytes this implementation holds (what a run measures)
// and the bytes the stack holds (what `predict` reports on a GPU cluster). Under fp32 they
// are the same.
enum class Held : uint8_t {
  kAsStored,  // the same tensor in the same dtype
  kBf16,      // fp32 here, bf16 in the stack under bf16-mixed (autocast's outputs and grads)
  kStream,    // the residual stream and its gradient: bf16 where the parameters the model
              // computes with are bf16 (FSDP, FSDP2, DeepSpeed), fp32 under DDP's autocast
  kNone,      // an fp32 work copy of a bf16 tensor: the stack's bf16 kernels read the tensor
};
struct HeldPolicy {
  bool bf16 = false;         // bf16-mixed
  bool stream_bf16 = false;  // the model computes with bf16 parameters
};

class OutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where bytes really come from: host (aligned, zero-filled) or a device allocator.
struct RawAllocator {
  std::function<void*(size_t)> allocate;  // returns zero-filled memory
  std::function<void(void*)> release;
};
RawAllocator host_allocator();

class MemoryTracker {
 public:
  explicit MemoryTracker(RawAllocator raw = host_allocator());
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  // held: the bytes the stack holds for it (Held above); the limit applies to `bytes`.
  void* allocate(MemCategory c, size_t bytes, uint64_t held);  // throws OutOfMemory past the limit
  void* allocate(MemCategory c, size_t bytes) { return allocate(c, bytes, bytes); }
  void release(void* p, MemCategory c, size_t bytes, uint64_t held);
  void release(void* p, MemCategory c, size_t bytes) { release(p, c, bytes, bytes); }

  void set_held_policy(HeldPolicy p) { policy_ = p; }
  uint64_t held_bytes(Held h, uint64_t bytes) const;
  // The stack's ledger: bytes now per category, its peak total and the breakdown at that peak.
  uint64_t held_current(MemCategory c) const { return held_current_[int(c)]; }
  uint64_t held_peak_total() const { return held_peak_total_; }
  const MemBreakdown& held_breakdown_at_peak() const { return held_at_peak_; }

  uint64_t current(MemCategory c) const { return current_[int(c)]; }
  uint64_t peak(MemCategory c) const { return peak_per_category_[int(c)]; }
  uint64_t current_total() const { return current_total_; }
  uint64_t peak_total() const { return peak_total_; }
  const MemBreakdown& current_breakdown() const { return current_; }
  const MemBreakdown& breakdown_at_peak() const { return at_peak_; }

  void set_limit(uint64_t bytes) { limit_ = bytes; }  // 0 = no limit
  uint64_t limit() const { return limit_; }
  // Deferred: an allocation past the limit is still made, and the first such OutOfMemory
  // message is kept for the caller to act on at a point every rank reaches (the end of a
  // step). One rank throwing mid-step would leave the others blocked in the step's
  // collectives. Only the limit defers: a failing RawAllocator still throws.
  void defer_limit_failures(bool defer) { defer_ = defer; }
  bool over_limit() const { return !overflow_.empty(); }
  const std::string& over_limit_message() const { return overflow_; }
  void reset_peak();  // peak := current (start of a measurement window)

  static std::string format_breakdown(const MemBreakdown& b);
  static uint64_t rss_hwm_bytes();  // VmHWM of this process (0 where unavailable)

 private:
  RawAllocator raw_;
  MemBreakdown current_{};
  MemBreakdown peak_per_category_{};
  MemBreakdown at_peak_{};
  uint64_t current_total_ = 0;
  uint64_t peak_total_ = 0;
  HeldPolicy policy_;
  MemBreakdown held_current_{};
  MemBreakdown held_at_peak_{};
  uint64_t held_current_total_ = 0;
  uint64_t held_peak_total_ = 0;
  uint64_t limit_ = 0;
  bool defer_ = false;
  std::string overflow_;
};

// Move-only RAII buffer of n elements of T, counted under one category.
template <class T>
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  TrackedBuffer(MemoryTracker& t, MemCategory c, size_t n, Held h = Held::kAsStored)
      : tracker_(&t), category_(c), size_(n), held_(t.held_bytes(h, n * sizeof(T))),
        data_(n ? static_cast<T*>(t.allocate(c, n * sizeof(T), held_)) : nullptr) {}
  TrackedBuffer(TrackedBuffer&& o) noexcept { *this = std::move(o); }
  TrackedBuffer& operator=(TrackedBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      tracker_ = std::exchange(o.tracker_, nullptr);
      category_ = o.category_;
      size_ = std::exchange(o.size_, 0);
      held_ = std::exchange(o.held_, 0);
      data_ = std::exchange(o.data_, nullptr);
    }
    return *this;
  }
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;
  ~TrackedBuffer() { reset(); }

  void reset() {
    if (data_ != nullptr) tracker_->release(data_, category_, size_ * sizeof(T), held_);
    data_ = nullptr;
    size_ = 0;
    held_ = 0;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  bool empty() const { return data_ == nullptr; }
  std::span<T> span() { return {data_, size_}; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  MemoryTracker* tracker_ = nullptr;
  MemCategory category_ = MemCategory::kWorkspace;
  size_t size_ = 0;
  uint64_t held_ = 0;
  T* data_ = nullptr;
};

}  // namespace sb
