// What the model computes on: fp32 views of full tensors. Where a strategy stores a tensor in
// fp32 the view is the storage itself; in bf16-mixed the parameter is upcast into a counted
// fp32 workspace for the module and its gradient is accumulated in fp32 workspace, then added
// into the bf16 storage when the module's backward ends. No communication, no policy.
#pragma once

#include <unordered_map>

#include "harness/common/dtype.h"
#include "harness/device/device.h"
#include "harness/memory/tracker.h"
#include "harness/model/layout.h"

namespace sb {

class ComputeViews {
 public:
  ComputeViews(const ModelLayout& model, Device& device, MemoryTracker& memory)
      : model_(model), device_(device), memory_(memory) {}
  const float* param(int t, const void* storage, DType dtype);
  float* grad(int t, void* storage, DType dtype);
  // End of a module's backward: add fp32 grad workspaces into their bf16 storage.
  void flush_grads();
  // End of a module: drop parameter workspaces.
  void release_params() { params_.clear(); }

 private:
  struct PendingGrad { void* storage; TrackedBuffer<float> work; };
  const ModelLayout& model_;
  Device& device_;
  MemoryTracker& memory_;
  std::unordered_map<int, TrackedBuffer<float>> params_;
  std::unordered_map<int, PendingGrad> grads_;
};

}  // namespace sb
