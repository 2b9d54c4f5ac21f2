// Training works end to end on one rank (tiny's loss falls under AdamW on the synthetic data),
// and the data generator is deterministic and independent of how the global batch is split.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "harness/device/device.h"
#include "harness/model/config.h"
#include "harness/model/data.h"
#include "harness/model/gpt.h"
#include "tests/unit/model_test_util.h"

namespace sb::testing {
namespace {

TEST(ModelTrain, TinyLossFallsUnderAdamW) {
  const GptConfig c = parse_model("tiny");
  auto dev = make_cpu_device();
  MemoryTracker mem(dev->allocator());
  const int B = 8, T = c.seq_len, steps = 50;
  GptModel model(c, B, *dev, mem);
  FullParams p(model.layout(), mem, 42);
  std::vector<TrackedBuffer<float>> m, v;
  for (const auto& t : model.layout().tensors) {
    m.emplace_back(mem, MemCategory::kOptimizer, t.numel);
    v.emplace_back(mem, MemCategory::kOptimizer, t.numel);
  }
  std::vector<int> tok(B * T), tgt(B * T);
  std::vector<float> losses;
  for (int step = 0; step < steps; ++step) {
    make_batch(7, first_sample_of(step, 1, 0, B), B, T, c.vocab, tok.data(), tgt.data());
    p.zero_grads();
    losses.push_back(model.forward(tok.data(), tgt.data(), p));
    model.backward(p);
    for (size_t t = 0; t < p.params.size(); ++t) {
      const float wd = model.layout().tensors[t].decay ? 0.1f : 0.0f;
      dev->adamw(p.params[t].data(), p.grads[t].data(), m[t].data(), v[t].data(),
                 p.params[t].size(), 3e-3f, 0.9f, 0.95f, 1e-8f, wd, step + 1, 1.0f);
    }
  }
  EXPECT_NEAR(losses[0], std::log(double(c.vocab)), 0.2);  // starts near uniform
  const double tail = std::accumulate(losses.end() - 5, losses.end(), 0.0) / 5.0;
  EXPECT_LT(tail, 0.7 * losses[0]) << "first " << losses[0] << " last " << losses.back();
}

TEST(ModelData, DeterministicLearnableSequences) {
  const int B = 3, T = 16, V = 64;
  std::vector<int> a(B * T), at(B * T), b(B * T), bt(B * T), other(B * T), ot(B * T);
  make_batch(5, 100, B, T, V, a.data(), at.data());
  make_batch(5, 100, B, T, V, b.data(), bt.data());
  make_batch(6, 100, B, T, V, other.data(), ot.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(at, bt);
  EXPECT_NE(a, other);  // the seed matters
  for (int s = 0; s < B; ++s) {
    const int* x = a.data() + s * T;
    const int* y = at.data() + s * T;
    const int stride = ((y[0] - x[0]) % V + V) % V;
    EXPECT_GE(stride, 1);
    EXPECT_LE(stride, 7);
    for (int j = 0; j < T; ++j) {
      EXPECT_GE(x[j], 0);
      EXPECT_LT(x[j], V);
      EXPECT_EQ(y[j], (x[j] + stride) % V);  // constant stride
      if (j + 1 < T) {
        EXPECT_EQ(y[j], x[j + 1]);  // targets are the inputs shifted by one
      }
    }
  }
}

TEST(ModelData, GlobalBatchIsIndependentOfTheRankSplit) {
  const int T = 16, V = 64;
  for (uint64_t step : {0, 3}) {
    std::vector<int> whole(4 * T), whole_t(4 * T), half(2 * T), half_t(2 * T);
    make_batch(9, first_sample_of(step, 1, 0, 4), 4, T, V, whole.data(), whole_t.data());
    for (int r = 0; r < 2; ++r) {  // world 2, batch 2 per rank
      make_batch(9, first_sample_of(step, 2, r, 2), 2, T, V, half.data(), half_t.data());
      EXPECT_TRUE(std::equal(half.begin(), half.end(), whole.begin() + r * 2 * T)) << r;
      EXPECT_TRUE(std::equal(half_t.begin(), half_t.end(), whole_t.begin() + r * 2 * T)) << r;
    }
  }
}

}  // namespace
}  // namespace sb::testing
