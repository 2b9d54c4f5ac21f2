// Size-bounded gradient buckets in the order gradients become ready during backward, as
// PyTorch DDP and DeepSpeed's reduce buckets group them. Each bucket is a flat layout padded to
// the shard count (1 for DDP), so a bucket reduce-scatters into equal per-rank chunks.
#pragma once

#include <utility>
#include <vector>

#include "harness/model/flat_layout.h"
#include "strategies/strategy.h"

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

// Tensor t inside `buffers`, one flat buffer per bucket of `plan`.
std::pair<void*, DType> in_bucket(const BucketPlan& plan, std::vector<TypedBuffer>& buffers,
                                  int t);

// DDP and ZeRO-1/2: the full parameters on every rank, one flat buffer per bucket of plan_.
class ReplicatedBuckets : public Strategy {
 public:
  using Strategy::Strategy;
  std::vector<float> gather_full_params() override;
  uint64_t padded_params() const override { return plan_.padded_params(); }

 protected:
  std::pair<const void*, DType> param_storage(int t) override {
    return in_bucket(plan_, params_, t);
  }

  BucketPlan plan_;
  std::vector<TypedBuffer> params_;
};

}  // namespace sb

namespace sb {

// PyTorch DDP's Reducer (torch 1.13.1, torch/csrc/distributed/c10d/reducer.cpp,
// compute_bucket_assignment_by_size): a tensor joins the open bucket first, and the bucket
// closes once its size reaches the limit (so a bucket may overshoot by its last tensor). The
// first bucket's limit is `first_cap_elements` (dist._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB), every
// later one `cap_elements` (bucket_cap_mb). Buckets are unpadded (DDP all-reduces them whole).
BucketPlan plan_reducer_buckets(const ModelLayout& model, const std::vector<int>& ready_order,
                                uint64_t first_cap_elements, uint64_t cap_elements);

// The order PyTorch's autograd engine fires the Reducer's per-parameter hooks in (what
// Reducer::rebuild_buckets records as rebuilt_params_): modules from last to first and, inside a
// module, parameters from last to first (a Linear's bias before its weight; wpe before wte).
// Observed through bench/torch_ddp.py --count-buckets and checked by
// tests/peer/torch_ddp_buckets_test.py.
std::vector<int> autograd_ready_order(const ModelLayout& model);

}  // namespace sb
