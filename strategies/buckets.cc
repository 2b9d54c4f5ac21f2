// Greedy bucketing in gradient-ready order (see header).
#include "strategies/buckets.h"

namespace sb {

BucketPlan plan_buckets(const ModelLayout& model, const std::vector<int>& ready_order,
                        uint64_t cap_elements, uint64_t pad_multiple) {
  BucketPlan plan;
  plan.bucket_of_tensor.assign(model.tensors.size(), -1);
  std::vector<int> current;
  uint64_t current_elems = 0;
  auto close = [&] {
    if (current.empty()) return;
    for (int t : current) plan.bucket_of_tensor[t] = int(plan.buckets.size());
    plan.buckets.push_back(FlatLayout::build(model, current, pad_multiple));
    plan.tensors_left.push_back(int(current.size()));
    current.clear();
    current_elems = 0;
  };
  for (int t : ready_order) {
    const uint64_t n = model.tensors[t].numel;
    if (!current.empty() && current_elems + n > cap_elements) close();
    current.push_back(t);
    current_elems += n;
  }
  close();
  return plan;
}

}  // namespace sb
