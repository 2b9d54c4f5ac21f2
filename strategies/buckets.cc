// Greedy bucketing in gradient-ready order (see header).
#include "strategies/buckets.h"

#include <algorithm>
#include <numeric>

namespace sb {

namespace {

// Appends `tensors` as the next bucket of `plan` (no-op when empty).
void close_bucket(const ModelLayout& model, std::vector<int>& tensors, uint64_t pad_multiple,
                  BucketPlan& plan) {
  if (tensors.empty()) return;
  for (int t : tensors) plan.bucket_of_tensor[t] = int(plan.buckets.size());
  plan.buckets.push_back(FlatLayout::build(model, tensors, pad_multiple));
  plan.tensors_left.push_back(int(tensors.size()));
  tensors.clear();
}

}  // namespace

BucketPlan plan_buckets(const ModelLayout& model, const std::vector<int>& ready_order,
                        uint64_t cap_elements, uint64_t pad_multiple) {
  BucketPlan plan;
  plan.bucket_of_tensor.assign(model.tensors.size(), -1);
  std::vector<int> current;
  uint64_t current_elems = 0;
  for (int t : ready_order) {
    const uint64_t n = model.tensors[t].numel;
    if (!current.empty() && current_elems + n > cap_elements) {
      close_bucket(model, current, pad_multiple, plan);
      current_elems = 0;
    }
    current.push_back(t);
    current_elems += n;
  }
  close_bucket(model, current, pad_multiple, plan);
  return plan;
}

std::vector<int> autograd_ready_order(const ModelLayout& model) {
  const std::vector<int> ready = model.grad_ready_module();
  std::vector<int> order(model.tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return ready[a] != ready[b] ? ready[a] > ready[b] : a > b; });
  return order;
}

BucketPlan plan_reducer_buckets(const ModelLayout& model, const std::vector<int>& ready_order,
                                uint64_t first_cap_elements, uint64_t cap_elements) {
  BucketPlan plan;
  plan.bucket_of_tensor.assign(model.tensors.size(), -1);
  std::vector<int> current;
  uint64_t current_elems = 0;
  for (int t : ready_order) {
    current.push_back(t);
    current_elems += model.tensors[t].numel;
    const uint64_t limit = plan.buckets.empty() ? first_cap_elements : cap_elements;
    if (current_elems >= limit) {  // reducer.cpp: `if (bucket.size >= bucket_size_limit)`
      close_bucket(model, current, 1, plan);
      current_elems = 0;
    }
  }
  close_bucket(model, current, 1, plan);
  return plan;
}

}  // namespace sb
