// Shared by the model tests: FullParams, the simplest ModelHooks (every tensor whole and
// resident, grads beside them), and a deterministic uniform filler. No sharding, no comm.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/memory/tracker.h"
#include "harness/model/gpt.h"
#include "harness/model/layout.h"

namespace sb::testing {

class FullParams : public ModelHooks {
 public:
  FullParams(const ModelLayout& layout, MemoryTracker& memory, uint64_t seed = 1234) {
    for (int t = 0; t < int(layout.tensors.size()); ++t) {
      const uint64_t n = layout.tensors[t].numel;
      params.emplace_back(memory, MemCategory::kParams, n);
      grads.emplace_back(memory, MemCategory::kGrads, n);
      init_tensor_range(layout, t, 0, n, seed, params.back().data());
    }
  }
  const float* param(int t) override { return params[t].data(); }
  float* grad(int t) override { return grads[t].data(); }
  void zero_grads() {
    for (auto& g : grads)
      for (size_t i = 0; i < g.size(); ++i) g[i] = 0.0f;
  }

  std::vector<TrackedBuffer<float>> params, grads;
};

// Uniform in [lo, hi), from a counter hash so the values do not depend on the standard library.
inline void fill_uniform(float* x, size_t n, float lo, float hi, uint64_t seed) {
  for (size_t i = 0; i < n; ++i) {
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + (i + 1) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 31)) * 0x94d049bb133111ebull;
    z ^= z >> 29;
    x[i] = lo + (hi - lo) * float(double(z >> 40) / double(1ull << 24));
  }
}

}  // namespace sb::testing
