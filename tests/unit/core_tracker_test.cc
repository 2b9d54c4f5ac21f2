// The tracker's figures are what the tests allocate: per category, total, peak, the breakdown
// at the peak, and the limit turning into OutOfMemory that names the category (at once, or
// deferred: allocated anyway, the first message kept).
#include <gtest/gtest.h>

#include "harness/memory/tracker.h"
#include "harness/memory/typed_buffer.h"

namespace sb {
namespace {

TEST(Tracker, CountsPerCategoryAndPeakBreakdown) {
  MemoryTracker t;
  {
    TrackedBuffer<float> p(t, MemCategory::kParams, 1000);        // 4000 B
    TypedBuffer g(t, MemCategory::kGrads, DType::kBF16, 1000);    // 2000 B
    EXPECT_EQ(t.current(MemCategory::kParams), 4000u);
    EXPECT_EQ(t.current(MemCategory::kGrads), 2000u);
    EXPECT_EQ(t.current_total(), 6000u);
    {
      TrackedBuffer<double> a(t, MemCategory::kActivations, 500);  // 4000 B, the peak moment
      EXPECT_EQ(t.peak_total(), 10000u);
    }
    TrackedBuffer<uint8_t> w(t, MemCategory::kWorkspace, 100);
    EXPECT_EQ(t.current_total(), 6100u);
    EXPECT_EQ(t.peak_total(), 10000u);
    const MemBreakdown& b = t.breakdown_at_peak();
    EXPECT_EQ(b[int(MemCategory::kParams)], 4000u);
    EXPECT_EQ(b[int(MemCategory::kGrads)], 2000u);
    EXPECT_EQ(b[int(MemCategory::kActivations)], 4000u);
    EXPECT_EQ(b[int(MemCategory::kWorkspace)], 0u);
    EXPECT_EQ(t.peak(MemCategory::kActivations), 4000u);
  }
  EXPECT_EQ(t.current_total(), 0u);
  t.reset_peak();
  EXPECT_EQ(t.peak_total(), 0u);
}

TEST(Tracker, BuffersAreZeroedAndMovable) {
  MemoryTracker t;
  TrackedBuffer<float> a(t, MemCategory::kParams, 64);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], 0.0f);
  TrackedBuffer<float> b = std::move(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(t.current_total(), 256u);
  b.reset();
  EXPECT_EQ(t.current_total(), 0u);
}

TEST(Tracker, LimitRaisesOutOfMemoryNamingTheCategory) {
  MemoryTracker t;
  t.set_limit(1000);
  TrackedBuffer<float> p(t, MemCategory::kParams, 200);  // 800 B fits
  try {
    TrackedBuffer<float> g(t, MemCategory::kOptimizer, 100);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("optimizer"), std::string::npos) << msg;
    EXPECT_NE(msg.find("params=800"), std::string::npos) << msg;
  }
  EXPECT_EQ(t.current_total(), 800u);  // the failed allocation left nothing behind
}

TEST(Tracker, DeferredLimitAllocatesAndKeepsTheFirstMessage) {
  MemoryTracker t;
  t.set_limit(1000);
  t.defer_limit_failures(true);
  TrackedBuffer<float> p(t, MemCategory::kParams, 200);  // 800 B fits
  EXPECT_FALSE(t.over_limit());
  TrackedBuffer<float> g(t, MemCategory::kOptimizer, 100);  // past the limit: made anyway
  TrackedBuffer<float> a(t, MemCategory::kActivations, 100);
  ASSERT_NE(g.data(), nullptr);
  EXPECT_EQ(t.current_total(), 1600u);
  EXPECT_EQ(t.peak_total(), 1600u);
  ASSERT_TRUE(t.over_limit());
  const std::string& msg = t.over_limit_message();
  EXPECT_NE(msg.find("optimizer"), std::string::npos) << msg << " (the first, not the second)";
  // The breakdown is of the moment of the first failure: activations not yet allocated.
  EXPECT_NE(msg.find("activations=0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("params=800"), std::string::npos) << msg;
}

TEST(Tracker, RssHighWaterMarkIsReadable) {
  EXPECT_GT(MemoryTracker::rss_hwm_bytes(), 0u);
}

}  // namespace
}  // namespace sb
