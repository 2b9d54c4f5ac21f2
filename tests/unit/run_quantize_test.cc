// ZeRO++ qwZ's quantiser (strategies/quantize.h) against DeepSpeed's rules, derived by hand:
// CUDAQuantizer.quantize's block search and Params<Symmetric, 8>'s rounding bound.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "harness/device/device.h"
#include "strategies/quantize.h"

namespace sb {
namespace {

TEST(QwzBlocks, DeepSpeedsSearch) {
  EXPECT_EQ(qwz_blocks(1024), 1u);   // ceil(1024/8000) = 1 and 8 | 1024
  EXPECT_EQ(qwz_blocks(8000), 1u);   // 8000/1 is not over 8000: no doubling
  EXPECT_EQ(qwz_blocks(24000), 3u);  // ceil = 3, 24 | 24000; 24000/3 = 8000, not over
  EXPECT_EQ(qwz_blocks(8008), 7u);   // ceil = 2; 8008 = 8·7·11·13: the first g with 8g | n is 7
  EXPECT_EQ(qwz_blocks(65536), 16u);  // ceil = 9 -> 16 (8·16 | 65536), 4096 per block
  EXPECT_EQ(qwz_blocks(20), 1u);     // not a multiple of 8 (DeepSpeed asserts): ceil(20/8000)
}

// Symmetric 8-bit: step = absmax/128, codes rounded to nearest, so |error| <= step/2, except
// +absmax itself, which maps to 128 and is clamped to 127: error exactly one step.
TEST(QwzRoundTrip, ErrorWithinHalfAStepPerBlock) {
  auto dev = make_cpu_device();
  const uint64_t n = 8008, blocks = qwz_blocks(n), len = quant_block_len(n, blocks);
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  for (uint64_t i = 2 * len; i < 3 * len; ++i) v[i] = 0;  // an all-zero block stays zero
  std::vector<int8_t> codes(n);
  std::vector<float> scales(blocks), back(n);
  quantize_int8(*dev, v.data(), DType::kF32, n, blocks, codes.data(), scales.data());
  dequantize_int8(*dev, codes.data(), scales.data(), n, blocks, 1, back.data(), DType::kF32);
  for (uint64_t b = 0; b < blocks; ++b) {
    float absmax = 0;
    for (uint64_t i = b * len; i < (b + 1) * len; ++i) absmax = std::max(absmax, std::fabs(v[i]));
    EXPECT_FLOAT_EQ(scales[b], absmax == 0 ? 1.0f : absmax / 128.0f) << "block " << b;
    for (uint64_t i = b * len; i < (b + 1) * len; ++i) {
      const double err = std::fabs(double(back[i]) - v[i]);
      const double bound = v[i] == absmax ? absmax / 128.0 : absmax / 256.0;
      ASSERT_LE(err, bound + 1e-6 * absmax) << "element " << i;  // + fp32 arithmetic
    }
  }
}

}  // namespace
}  // namespace sb
