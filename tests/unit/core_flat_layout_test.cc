// Flat layouts: offsets back to back, padding to the shard count, segments of a range, and
// initialisation of any range equal to the same range of the whole.
#include <gtest/gtest.h>

#include "harness/model/flat_layout.h"

namespace sb {
namespace {

TEST(FlatLayout, PadsToShardCountAndSplitsRanges) {
  const ModelLayout m = make_layout(parse_model("tiny"));
  const FlatLayout f = FlatLayout::build(m, {2, 3, 4}, 5);  // ln_1.weight, ln_1.bias, qkv.weight
  EXPECT_EQ(f.numel, 32u + 32u + 96u * 32u);
  EXPECT_EQ(f.padded % 5, 0u);
  EXPECT_LT(f.padded - f.numel, 5u);
  EXPECT_EQ(f.find(3)->offset, 32u);
  uint64_t covered = 0;
  f.for_each_segment(20, 70, [&](int t, uint64_t toff, uint64_t foff, uint64_t len) {
    covered += len;
    if (t == 2) { EXPECT_EQ(toff, 20u); EXPECT_EQ(len, 12u); }
    if (t == 4) { EXPECT_EQ(foff, 64u); EXPECT_EQ(toff, 0u); }
  });
  EXPECT_EQ(covered, 50u);
}

TEST(FlatLayout, RangeInitialisationMatchesTheWhole) {
  const ModelLayout m = make_layout(parse_model("tiny"));
  std::vector<int> all;
  for (size_t t = 0; t < m.tensors.size(); ++t) all.push_back(int(t));
  const FlatLayout f = FlatLayout::build(m, all, 4);
  std::vector<float> whole(f.padded), part(1000);
  init_flat_range(m, f, 0, f.padded, 7, whole.data());
  init_flat_range(m, f, 1234, 2234, 7, part.data());
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(part[i], whole[1234 + i]);
  for (uint64_t i = f.numel; i < f.padded; ++i) EXPECT_EQ(whole[i], 0.0f);
}

}  // namespace
}  // namespace sb
