// ZeRO++'s quantiser (strategies/quantize.h) against DeepSpeed's rules, derived by hand:
// CUDAQuantizer.quantize's block search, Params<Symmetric, 8>'s and <Symmetric, 4>'s rounding
// bounds, and qgZ's int4 packing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "harness/device/device.h"
#include "strategies/quantize.h"
#include "tests/closed_forms.h"

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

// DeepSpeed's step-up search written out (one g at a time: closed_forms::ds_quant_blocks)
// against the divisor search at every n up to 200,000; and shards whose search would walk ~10^9 steps (2^30 + 1, odd; 8 times the
// prime 10^9 + 7), which `predict --params 2147483649 --zero-quantized-weights` once hung on.
TEST(QwzBlocks, EqualsTheStepUpSearchAndStaysFastOnHugeShards) {
  for (uint64_t n = 1; n <= 200'000; ++n)
    ASSERT_EQ(qwz_blocks(n), closed_forms::ds_quant_blocks(n)) << n;
  EXPECT_EQ(qwz_blocks((1ull << 30) + 1), ((1ull << 30) + 1 + 7999) / 8000);
  EXPECT_EQ(qwz_blocks(8ull * 1'000'000'007ull), 1'000'000'007ull);
  EXPECT_EQ(qwz_blocks(8ull << 40), 1ull << 31);  // first 1,099,511,628: the next 2^k, 4096 each
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

// qgZ's int4 (Params<Symmetric, 4>): step = absmax/8, codes in -8..7, |error| <= step/2 but one
// step for +absmax (8 clamped to 7); codes travel two to a byte and come back unchanged,
// negative ones sign-extended, an odd count's last nibble alone.
TEST(QgzInt4, RoundTripWithinHalfAStepAndPackedTwoToAByte) {
  const uint64_t n = 99, blocks = 4, len = quant_block_len(n, blocks);
  std::vector<float> v(n), scales(blocks);
  for (uint64_t i = 0; i < n; ++i) v[i] = float(std::sin(0.7 * double(i)) * (1 + i % 5));
  std::vector<int8_t> codes(n), back(n);
  quantize_symmetric(v.data(), n, blocks, 4, codes.data(), scales.data());
  std::vector<uint8_t> packed((n + 1) / 2);
  pack_int4(codes.data(), n, packed.data());
  unpack_int4(packed.data(), n, back.data());
  EXPECT_EQ(back, codes);
  for (uint64_t b = 0; b < blocks; ++b) {
    float absmax = 0;
    for (uint64_t i = b * len; i < std::min(n, (b + 1) * len); ++i)
      absmax = std::max(absmax, std::fabs(v[i]));
    EXPECT_FLOAT_EQ(scales[b], absmax / 8);
    for (uint64_t i = b * len; i < std::min(n, (b + 1) * len); ++i) {
      EXPECT_GE(codes[i], -8);
      EXPECT_LE(codes[i], 7);
      const float err = std::fabs(float(codes[i]) * scales[b] - v[i]);
      EXPECT_LE(err, v[i] == absmax ? scales[b] * 1.0001f : scales[b] * 0.5001f) << i;
    }
  }
  const int8_t all[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
  uint8_t two[8];
  int8_t again[16];
  pack_int4(all, 16, two);
  unpack_int4(two, 16, again);
  EXPECT_EQ(std::vector<int8_t>(again, again + 16), std::vector<int8_t>(all, all + 16));
}

// qgZ's host passes (quantize_int4_parts, dequantize_int4_sum: what QgzReduce runs and the
// calibration times) against the element-wise definitions: every partition's codes and scales
// as quantize_symmetric + pack_int4 give them, and the sum over blocks of code x its group's
// scale (the same products added in the same order: equal up to the rounding a fused
// multiply-add saves, which the library's -march may use and this file's flags not), for group
// lengths that do and do not divide the partition and partitions of an odd number of bytes'
// worth.
TEST(QgzInt4, PartsPassesMatchTheElementwiseDefinitions) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (uint64_t part : {6u, 10u, 1000u, 4098u})
    for (uint64_t groups : {1u, 3u, 7u, 64u}) {
      if (groups > part) continue;
      const uint64_t blocks = 3, slots = 2, n = blocks * slots * part;
      std::vector<float> v(n);
      for (float& x : v) x = normal(rng);
      std::vector<uint8_t> packed(n / 2);
      std::vector<float> scales(blocks * slots * groups);
      quantize_int4_parts(v.data(), blocks * slots, part, groups, packed.data(), scales.data());
      std::vector<float> want(slots * part, 0.0f), magnitude(slots * part, 0.0f);
      std::vector<int8_t> codes(part), got_codes(part);
      std::vector<float> want_scales(groups);
      const uint64_t len = quant_block_len(part, groups);
      for (uint64_t at = 0; at < blocks * slots; ++at) {
        quantize_symmetric(v.data() + at * part, part, groups, 4, codes.data(),
                           want_scales.data());
        unpack_int4(packed.data() + at * part / 2, part, got_codes.data());
        ASSERT_EQ(got_codes, codes) << "part " << part << " groups " << groups << " at " << at;
        for (uint64_t g = 0; g < groups; ++g)
          ASSERT_EQ(scales[at * groups + g], want_scales[g]);
        float* dst = want.data() + (at % slots) * part;
        for (uint64_t i = 0; i < part; ++i) {
          dst[i] += float(codes[i]) * want_scales[i / len];
          magnitude[(at % slots) * part + i] += std::fabs(float(codes[i]) * want_scales[i / len]);
        }
      }
      const HostVector<float> sum =
          dequantize_int4_sum(packed.data(), scales.data(), blocks, slots, part, groups);
      ASSERT_EQ(sum.size(), want.size());
      for (size_t i = 0; i < sum.size(); ++i)
        ASSERT_NEAR(sum[i], want[i], 4e-7f * magnitude[i])
            << "part " << part << " groups " << groups << " i " << i;
    }
}

}  // namespace
}  // namespace sb
