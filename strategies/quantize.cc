// Block-wise int8 quantisation (see header): DeepSpeed's block search and symmetric rounding.
#include "strategies/quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sb {
namespace {

constexpr uint64_t kTargetBlock = 8000;  // CUDAQuantizer.target_group_size

std::vector<float> to_f32(Device& device, const void* src, DType t, uint64_t n) {
  std::vector<float> out(n);
  if (t == DType::kF32) {
    device.copy_to_host(out.data(), src, n * 4);
    return out;
  }
  std::vector<uint16_t> h(n);
  device.copy_to_host(h.data(), src, n * 2);
  for (uint64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(h[i]);
  return out;
}

}  // namespace

uint64_t qwz_blocks(uint64_t n) {
  if (n == 0) return 1;
  const uint64_t first = (n + kTargetBlock - 1) / kTargetBlock;
  uint64_t g = first;
  while (g < n && n % (8 * g) != 0) ++g;
  if (n % (8 * g) != 0) return first;  // DeepSpeed asserts here; see the header
  while (n % (16 * g) == 0 && n / g > kTargetBlock) g *= 2;
  return g;
}

void quantize_int8(Device& device, const void* src, DType t, uint64_t n, uint64_t blocks,
                   void* codes, void* scales) {
  if (!device.holds_data() || n == 0) return;
  const std::vector<float> v = to_f32(device, src, t, n);
  std::vector<int8_t> q(n);
  std::vector<float> s(blocks, 1.0f);
  const uint64_t len = quant_block_len(n, blocks);
  for (uint64_t b = 0; b * len < n; ++b) {
    const uint64_t lo = b * len, hi = std::min(n, lo + len);
    float absmax = 0;
    for (uint64_t i = lo; i < hi; ++i) absmax = std::max(absmax, std::fabs(v[i]));
    // Params<Symmetric, 8>: scale = 2^8 / (2·absmax) (1 when absmax is 0); stored inverted
    const float scale = absmax == 0 ? 1.0f : 256.0f / (2.0f * absmax);
    s[b] = 1.0f / scale;
    for (uint64_t i = lo; i < hi; ++i)
      q[i] = int8_t(std::clamp(std::lrintf(v[i] * scale), -128L, 127L));
  }
  device.copy_to_device(codes, q.data(), n);
  device.copy_to_device(scales, s.data(), blocks * 4);
}

void dequantize_int8(Device& device, const void* codes, const void* scales, uint64_t n,
                     uint64_t blocks, uint64_t ranks, void* dst, DType t) {
  if (!device.holds_data() || n == 0) return;
  std::vector<int8_t> q(ranks * n);
  std::vector<float> s(ranks * blocks);
  device.copy_to_host(q.data(), codes, q.size());
  device.copy_to_host(s.data(), scales, s.size() * 4);
  const uint64_t len = quant_block_len(n, blocks);
  std::vector<float> out(ranks * n);
  for (uint64_t r = 0; r < ranks; ++r)
    for (uint64_t i = 0; i < n; ++i)
      out[r * n + i] = float(q[r * n + i]) * s[r * blocks + i / len];
  if (t == DType::kF32) {
    device.copy_to_device(dst, out.data(), out.size() * 4);
    return;
  }
  std::vector<uint16_t> h(out.size());
  for (size_t i = 0; i < out.size(); ++i) h[i] = f32_to_bf16(out[i]);
  device.copy_to_device(dst, h.data(), h.size() * 2);
}

}  // namespace sb
