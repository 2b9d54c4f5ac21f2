// fp32 views over fp32 or bf16 storage (see header).
#include "harness/model/compute_views.h"

#include "harness/common/check.h"

namespace sb {

const float* ComputeViews::param(int t, const void* storage, DType dtype) {
  SB_CHECK(storage != nullptr, "parameter " << model_.tensors[t].name << " is not materialised");
  if (dtype == DType::kF32) return static_cast<const float*>(storage);
  auto it = params_.find(t);
  if (it != params_.end()) return it->second.data();
  const uint64_t n = model_.tensors[t].numel;
  // The stack's bf16 kernels read the bf16 parameter itself (Held::kNone).
  TrackedBuffer<float> work(memory_, MemCategory::kWorkspace, n, Held::kNone);
  device_.bf16_to_f32(work.data(), static_cast<const uint16_t*>(storage), n);
  return params_.emplace(t, std::move(work)).first->second.data();
}

float* ComputeViews::grad(int t, void* storage, DType dtype) {
  SB_CHECK(storage != nullptr, "gradient of " << model_.tensors[t].name << " has no storage");
  if (dtype == DType::kF32) return static_cast<float*>(storage);
  auto it = grads_.find(t);
  if (it != grads_.end()) return it->second.work.data();
  const uint64_t n = model_.tensors[t].numel;
  // The stack's backward writes the bf16 gradient into its storage (Held::kNone).
  PendingGrad pg{storage, TrackedBuffer<float>(memory_, MemCategory::kWorkspace, n, Held::kNone)};
  return grads_.emplace(t, std::move(pg)).first->second.work.data();
}

void ComputeViews::flush_grads() {
  for (auto& [t, pg] : grads_) {
    const uint64_t n = model_.tensors[t].numel;
    // storage += work, summed in fp32 and rounded to bf16 once.
    TrackedBuffer<float> acc(memory_, MemCategory::kWorkspace, n, Held::kNone);
    device_.bf16_to_f32(acc.data(), static_cast<const uint16_t*>(pg.storage), n);
    device_.add_inplace(acc.data(), pg.work.data(), n);
    device_.f32_to_bf16(static_cast<uint16_t*>(pg.storage), acc.data(), n);
  }
  grads_.clear();
}

}  // namespace sb
