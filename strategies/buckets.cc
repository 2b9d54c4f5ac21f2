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

// Greedy in `ready_order`: a tensor closes the open bucket before it joins when it would take
// the bucket past the cap (DeepSpeed), or after it joins once the bucket has reached the
// limit (DDP's Reducer).
template <class CloseBefore, class CloseAfter>
BucketPlan plan_greedy(const ModelLayout& model, const std::vector<int>& ready_order,
                       uint64_t pad_multiple, CloseBefore close_before, CloseAfter close_after) {
  BucketPlan plan;
  plan.bucket_of_tensor.assign(model.tensors.size(), -1);
  std::vector<int> current;
  uint64_t elems = 0;
  for (int t : ready_order) {
    const uint64_t n = model.tensors[t].numel;
    if (!current.empty() && close_before(elems, n)) {
      close_bucket(model, current, pad_multiple, plan);
      elems = 0;
    }
    current.push_back(t);
    elems += n;
    if (close_after(elems, plan)) {
      close_bucket(model, current, pad_multiple, plan);
      elems = 0;
    }
  }
  close_bucket(model, current, pad_multiple, plan);
  return plan;
}

}  // namespace

BucketPlan plan_buckets(const ModelLayout& model, const std::vector<int>& ready_order,
                        uint64_t cap_elements, uint64_t pad_multiple) {
  return plan_greedy(
      model, ready_order, pad_multiple,
      [&](uint64_t elems, uint64_t n) { return elems + n > cap_elements; },
      [](uint64_t, const BucketPlan&) { return false; });
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
  // reducer.cpp: `if (bucket.size >= bucket_size_limit)`, the first bucket with its own limit
  return plan_greedy(model, ready_order, 1, [](uint64_t, uint64_t) { return false; },
                     [&](uint64_t elems, const BucketPlan& plan) {
                       return elems >= (plan.buckets.empty() ? first_cap_elements : cap_elements);
                     });
}

std::pair<void*, DType> in_bucket(const BucketPlan& plan, std::vector<TypedBuffer>& buffers,
                                  int t) {
  const int b = plan.bucket_of_tensor[t];
  return {buffers[b].at(plan.buckets[b].find(t)->offset), buffers[b].dtype()};
}

std::vector<float> ReplicatedBuckets::gather_full_params() {
  std::vector<float> out;
  for (size_t b = 0; b < params_.size(); ++b)
    flat_to_full(ctx_.model, plan_.buckets[b], params_[b].data(), params_[b].dtype(), ctx_.device,
                 out);
  return out;
}

}  // namespace sb
