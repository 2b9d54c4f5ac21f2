// The ModelHooks contract that strategies rely on: modules are bracketed in layout order
// (reverse in backward), param/grad are asked only inside a module that uses the tensor,
// grads are accumulated (+=), and the model's own memory is all counted as activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "harness/device/device.h"
#include "harness/model/config.h"
#include "harness/model/gpt.h"
#include "tests/unit/model_test_util.h"

namespace sb::testing {
namespace {

class RecordingHooks : public FullParams {
 public:
  RecordingHooks(const ModelLayout& l, MemoryTracker& mem) : FullParams(l, mem), layout_(l) {}
  void pre_forward(int m) override { open(m, false); }
  void post_forward(int m) override { close(m); }
  void pre_backward(int m) override { open(m, true); }
  void post_backward(int m) override { close(m); }
  const float* param(int t) override {
    EXPECT_TRUE(uses(t)) << "param(" << t << ") outside a module using it";
    return FullParams::param(t);
  }
  float* grad(int t) override {
    EXPECT_TRUE(uses(t) && backward_) << "grad(" << t << ") outside a backward module using it";
    return FullParams::grad(t);
  }
  std::vector<int> forward_order, backward_order;

 private:
  void open(int m, bool backward) {
    EXPECT_EQ(open_, -1) << "module " << m << " opened inside module " << open_;
    open_ = m;
    backward_ = backward;
    (backward ? backward_order : forward_order).push_back(m);
  }
  void close(int m) {
    EXPECT_EQ(open_, m);
    open_ = -1;
  }
  bool uses(int t) const {
    if (open_ < 0) return false;
    const auto& ts = layout_.modules[open_].tensors;
    return std::find(ts.begin(), ts.end(), t) != ts.end();
  }
  const ModelLayout& layout_;
  int open_ = -1;
  bool backward_ = false;
};

TEST(ModelHooks, ModulesBracketedInOrderAndTensorsAskedOnlyInside) {
  const GptConfig c = parse_model("tiny");
  auto dev = make_cpu_device();
  MemoryTracker mem(dev->allocator());
  GptModel model(c, 2, *dev, mem);
  RecordingHooks h(model.layout(), mem);
  std::vector<int> tok(2 * c.seq_len, 1), tgt(2 * c.seq_len, 2);
  model.forward(tok.data(), tgt.data(), h);
  model.backward(h);
  const int n = int(model.layout().modules.size());
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  EXPECT_EQ(h.forward_order, order);
  std::reverse(order.begin(), order.end());
  EXPECT_EQ(h.backward_order, order);
}

TEST(ModelHooks, GradsAccumulateAndForwardIsDeterministic) {
  const GptConfig c = parse_model("tiny");
  auto dev = make_cpu_device();
  MemoryTracker mem(dev->allocator());
  GptModel model(c, 2, *dev, mem);
  FullParams p(model.layout(), mem);
  std::vector<int> tok(2 * c.seq_len), tgt(2 * c.seq_len);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int(i % 64), tgt[i] = int((i * 3) % 64);
  p.zero_grads();
  const float l1 = model.forward(tok.data(), tgt.data(), p);
  model.backward(p);
  std::vector<std::vector<float>> once;
  for (auto& g : p.grads) once.emplace_back(g.data(), g.data() + g.size());
  const float l2 = model.forward(tok.data(), tgt.data(), p);
  model.backward(p);
  EXPECT_EQ(l1, l2);
  for (size_t t = 0; t < once.size(); ++t)
    for (size_t i = 0; i < once[t].size(); ++i)
      ASSERT_NEAR(p.grads[t][i], 2.0f * once[t][i], 1e-7 + 1e-5 * std::abs(once[t][i]))
          << model.layout().tensors[t].name;  // BLAS may sum in another order when beta = 1
}

// A strategy's post hook may run out of memory (a reduce bucket); that must reach the caller as
// OutOfMemory so the run records "oom", not terminate the process.
TEST(ModelHooks, OutOfMemoryFromAPostHookPropagates) {
  struct Throwing : FullParams {
    using FullParams::FullParams;
    void post_backward(int m) override {
      if (m == 3) throw OutOfMemory("bucket");
    }
  };
  const GptConfig c = parse_model("tiny");
  auto dev = make_cpu_device();
  MemoryTracker mem(dev->allocator());
  GptModel model(c, 1, *dev, mem);
  Throwing h(model.layout(), mem);
  std::vector<int> tok(c.seq_len, 1), tgt(c.seq_len, 2);
  model.forward(tok.data(), tgt.data(), h);
  EXPECT_THROW(model.backward(h), OutOfMemory);
}

TEST(ModelHooks, ModelMemoryIsCountedAsActivations) {
  const GptConfig c = parse_model("tiny");
  auto dev = make_cpu_device();
  MemoryTracker mem(dev->allocator());
  {
    GptModel model(c, 2, *dev, mem);
    EXPECT_GT(mem.current(MemCategory::kActivations), 0u);
    EXPECT_EQ(mem.current_total(), mem.current(MemCategory::kActivations));
  }
  EXPECT_EQ(mem.current_total(), 0u);
}

}  // namespace
}  // namespace sb::testing
