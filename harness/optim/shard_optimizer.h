// AdamW over one contiguous shard [begin, end) of a flat layout: owns the optimizer state of
// that shard (m, v, and in bf16-mixed the fp32 master copy: K = 8 or 12 bytes per element, ZeRO
// paper §5) and initialises the shard's parameters. It does not know who else holds what.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/device/device.h"
#include "harness/memory/tracker.h"
#include "harness/memory/typed_buffer.h"
#include "harness/model/flat_layout.h"

namespace sb {

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // on tensors with ParamTensor::decay (matrices, embeddings)
};

class ShardOptimizer {
 public:
  ShardOptimizer(const ModelLayout& model, const FlatLayout& flat, uint64_t begin, uint64_t end,
                 DType param_dtype, const AdamWConfig& cfg, uint64_t seed, Device& device,
                 MemoryTracker& memory);
  // Writes the initial values of the shard into `params` (param_dtype, end-begin elements).
  void init_params(void* params);
  // One AdamW step of the shard: grads (grad_dtype) are multiplied by grad_scale first.
  void step(void* params, const void* grads, DType grad_dtype, float grad_scale, int step);
  uint64_t size() const { return end_ - begin_; }
  // Optimizer bytes this shard holds (m, v, master).
  uint64_t state_bytes() const { return m_.bytes() + v_.bytes() + master_.bytes(); }

 private:
  struct Segment { uint64_t offset, len; bool decay; };  // relative to begin_
  const ModelLayout& model_;
  const FlatLayout& flat_;
  uint64_t begin_, end_;
  DType param_dtype_;
  AdamWConfig cfg_;
  uint64_t seed_;
  Device& device_;
  MemoryTracker& memory_;
  std::vector<Segment> segments_;
  TrackedBuffer<float> m_, v_, master_;
};

}  // namespace sb
