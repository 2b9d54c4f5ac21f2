// AdamW per tensor segment of a shard (the decay flag differs between tensors); padding is
// skipped. In bf16-mixed the update runs on the fp32 master and the stored bf16 params are
// re-rounded from it, as in mixed-precision training (Micikevicius et al. 2018).
#include "harness/optim/shard_optimizer.h"

#include "harness/common/check.h"

namespace sb {

ShardOptimizer::ShardOptimizer(const ModelLayout& model, const FlatLayout& flat, uint64_t begin,
                               uint64_t end, DType param_dtype, const AdamWConfig& cfg,
                               uint64_t seed, Device& device, MemoryTracker& memory)
    : model_(model), flat_(flat), begin_(begin), end_(end), param_dtype_(param_dtype),
      cfg_(cfg), seed_(seed), device_(device), memory_(memory),
      m_(memory, MemCategory::kOptimizer, end - begin),
      v_(memory, MemCategory::kOptimizer, end - begin) {
  SB_CHECK(begin <= end && end <= flat.padded, "shard out of range");
  if (param_dtype == DType::kBF16) master_ = TrackedBuffer<float>(memory, MemCategory::kOptimizer, end - begin);
  flat.for_each_segment(begin, end, [&](int t, uint64_t, uint64_t foff, uint64_t len) {
    segments_.push_back({foff - begin, len, model.tensors[t].decay});
  });
}

void ShardOptimizer::init_params(void* params) {
  const uint64_t n = size();
  if (n == 0 || !device_.holds_data()) return;  // a simulated device: sizes only
  std::vector<float> host(n);
  init_flat_range(model_, flat_, begin_, end_, seed_, host.data());
  if (param_dtype_ == DType::kF32) {
    device_.copy_to_device(params, host.data(), n * 4);
  } else {
    device_.copy_to_device(master_.data(), host.data(), n * 4);
    device_.f32_to_bf16(static_cast<uint16_t*>(params), master_.data(), n);
  }
}

void ShardOptimizer::step(void* params, const void* grads, DType grad_dtype, float grad_scale,
                          int step) {
  const uint64_t n = size();
  if (n == 0) return;
  const float* g = static_cast<const float*>(grads);
  TrackedBuffer<float> g32;
  if (grad_dtype == DType::kBF16) {
    // Upcast the bf16 grad shard once (workspace) so the update math is fp32 throughout.
    g32 = TrackedBuffer<float>(memory_, MemCategory::kWorkspace, n);
    device_.bf16_to_f32(g32.data(), static_cast<const uint16_t*>(grads), n);
    g = g32.data();
  }
  float* p = param_dtype_ == DType::kF32 ? static_cast<float*>(params) : master_.data();
  for (const Segment& s : segments_) {
    device_.adamw(p + s.offset, g + s.offset, m_.data() + s.offset, v_.data() + s.offset, s.len,
                  cfg_.lr, cfg_.beta1, cfg_.beta2, cfg_.eps, s.decay ? cfg_.weight_decay : 0.0f,
                  step, grad_scale);
  }
  if (param_dtype_ == DType::kBF16)
    device_.f32_to_bf16(static_cast<uint16_t*>(params), master_.data(), n);
}

}  // namespace sb
