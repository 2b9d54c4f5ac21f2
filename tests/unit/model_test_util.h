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

// The checkpointing tests' shapes: a 4-block GPT-2 and a 4-block Llama with grouped-query
// attention (4 heads on 2 K/V heads).
inline GptConfig gpt4() { return parse_model("4,24,3,10,37"); }
inline GptConfig llama4() {
  GptConfig c = parse_model("4,32,4,10,37", "llama");
  c.n_kv_head = 2;
  return c;
}

// Two forward+backward steps of a fresh model from the same parameters and batch (the second
// reuses the buffers the first left): the second's loss, the gradients summed over both, and
// the activation bytes the tracker counts.
struct TwoSteps {
  float loss = 0;
  std::vector<std::vector<float>> grads;  // per tensor
  uint64_t activation_bytes = 0;
};
inline TwoSteps two_steps(const GptConfig& c, bool bf16, int batch) {
  auto dev = make_cpu_device();
  MemoryTracker mem(dev->allocator());
  GptModel model(c, batch, *dev, mem, bf16);
  FullParams hooks(model.layout(), mem);
  hooks.zero_grads();
  const size_t n = size_t(batch) * c.seq_len;
  std::vector<int> tokens(n), targets(n);
  for (size_t i = 0; i < n; ++i) tokens[i] = int(i * 7 % c.vocab), targets[i] = int(i * 5 % c.vocab);
  TwoSteps r;
  for (int step = 0; step < 2; ++step) {
    r.loss = model.forward(tokens.data(), targets.data(), hooks);
    model.backward(hooks);
  }
  for (auto& g : hooks.grads) r.grads.emplace_back(g.data(), g.data() + g.size());
  r.activation_bytes = mem.current(MemCategory::kActivations);
  return r;
}

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
