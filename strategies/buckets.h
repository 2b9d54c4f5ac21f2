// Size-bounded gradient buckets in the order gradients become ready during backward, as
// PyTorch DDP and DeepSpeed's reduce buckets group them. Each bucket is a flat layout padded to
// the shard count (1 for DDP), so a bucket reduce-scatters into equal per-rank chunks.
#pragma once

#include <vector>

#include "harness/model/flat_layout.h"

namespace sb {

struct BucketPlan {
  std::vector<FlatLayout> buckets;
  std::vector<int> bucket_of_tensor;  // -1 for none
  std::vector<int> tensors_left;      // per bucket: tensors not yet ready (reset each step)
  uint64_t padded_params() const {
    uint64_t n = 0;
    for (const auto& b : buckets) n += b.padded;
    return n;
  }
};

// Tensors are never split: a tensor larger than the cap forms a bucket of its own.
BucketPlan plan_buckets(const ModelLayout& model, const std::vector<int>& ready_order,
                        uint64_t cap_elements, uint64_t pad_multiple);

}  // namespace sb
