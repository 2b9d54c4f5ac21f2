// Block-wise int8 quantisation (see header): DeepSpeed's block search and symmetric rounding.
#include "strategies/quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sb {
namespace {

constexpr uint64_t kTargetBlock = 8000;  // CUDAQuantizer.target_group_size

}  // namespace

void device_to_f32(Device& device, const void* src, DType t, uint64_t n, float* out) {
  if (t == DType::kF32) {
    device.copy_to_host(out, src, n * 4);
    return;
  }
  HostVector<uint16_t> h(n);
  device.copy_to_host(h.data(), src, n * 2);
  for (uint64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(h[i]);
}

HostVector<float> device_to_f32(Device& device, const void* src, DType t, uint64_t n) {
  HostVector<float> out(n);
  device_to_f32(device, src, t, n, out.data());
  return out;
}

void f32_to_device(Device& device, const float* v, uint64_t n, void* dst, DType t) {
  if (t == DType::kF32) {
    device.copy_to_device(dst, v, n * 4);
    return;
  }
  HostVector<uint16_t> h(n);
  for (uint64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(v[i]);
  device.copy_to_device(dst, h.data(), h.size() * 2);
}

namespace {
// The smallest divisor of m that is >= lo (m itself at worst): the first g DeepSpeed's step-up
// search stops at, found over the divisor pairs (d, m / d) with d <= sqrt(m), so a shard of
// 10^15 elements costs 10^7 steps, not the search's up to m (predict --params would hang).
uint64_t smallest_divisor_at_least(uint64_t m, uint64_t lo) {
  uint64_t best = m;
  for (uint64_t d = 1; d <= m / d; ++d) {
    if (m % d != 0) continue;
    if (d >= lo) return std::min(best, d);  // d grows: later small divisors are larger
    if (m / d >= lo) best = std::min(best, m / d);
  }
  return best;
}
}  // namespace

uint64_t qwz_blocks(uint64_t n) {
  if (n == 0) return 1;
  const uint64_t first = (n + kTargetBlock - 1) / kTargetBlock;
  if (n % 8 != 0) return first;  // no 8·g divides n: DeepSpeed asserts here; see the header
  uint64_t g = smallest_divisor_at_least(n / 8, first);
  while (n % (16 * g) == 0 && n / g > kTargetBlock) g *= 2;
  return g;
}

void quantize_symmetric(const float* v, uint64_t n, uint64_t blocks, int bits, int8_t* codes,
                        float* scales) {
  const uint64_t len = quant_block_len(n, blocks);
  const long q_max = (1L << (bits - 1)) - 1, q_min = -(1L << (bits - 1));
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t lo = std::min(n, b * len), hi = std::min(n, lo + len);
    float absmax = 0;
    for (uint64_t i = lo; i < hi; ++i) absmax = std::max(absmax, std::fabs(v[i]));
    // Params<Symmetric, bits>: scale = 2^bits / (2·absmax) (1 when absmax is 0); stored inverted
    const float scale = absmax == 0 ? 1.0f : float(1L << bits) / (2.0f * absmax);
    scales[b] = 1.0f / scale;
    for (uint64_t i = lo; i < hi; ++i)
      codes[i] = int8_t(std::clamp(std::lrintf(v[i] * scale), q_min, q_max));
  }
}

void quantize_int8(Device& device, const void* src, DType t, uint64_t n, uint64_t blocks,
                   void* codes, void* scales) {
  if (n == 0) return;
  if (!device.holds_data()) return device.quantizer_pass(QuantPass::kQuantize, n);
  const HostVector<float> v = device_to_f32(device, src, t, n);
  HostVector<int8_t> q(n);
  HostVector<float> s(blocks, 1.0f);
  quantize_symmetric(v.data(), n, blocks, 8, q.data(), s.data());
  device.copy_to_device(codes, q.data(), n);
  device.copy_to_device(scales, s.data(), blocks * 4);
}

void pack_int4(const int8_t* codes, uint64_t n, uint8_t* packed) {
  for (uint64_t i = 0; i < n; i += 2)
    packed[i / 2] = uint8_t((codes[i] & 0xF) | ((i + 1 < n ? codes[i + 1] & 0xF : 0) << 4));
}

namespace {
// Element i of packed 4-bit codes (element 2k in the low nibble), sign-extended.
inline int int4_code(const uint8_t* packed, uint64_t i) {
  const int nibble = (packed[i / 2] >> (4 * (i % 2))) & 0xF;
  return nibble >= 8 ? nibble - 16 : nibble;
}
}  // namespace

void unpack_int4(const uint8_t* packed, uint64_t n, int8_t* codes) {
  for (uint64_t i = 0; i < n; ++i) codes[i] = int8_t(int4_code(packed, i));
}

void quantize_int4_parts(const float* parts, uint64_t slots, uint64_t part, uint64_t groups,
                         uint8_t* packed, float* scales) {
  HostVector<int8_t> codes(part);
  for (uint64_t s = 0; s < slots; ++s) {
    quantize_symmetric(parts + s * part, part, groups, 4, codes.data(), scales + s * groups);
    pack_int4(codes.data(), part, packed + s * part / 2);
  }
}

HostVector<float> dequantize_int4_sum(const uint8_t* packed, const float* scales,
                                      uint64_t blocks, uint64_t slots, uint64_t part,
                                      uint64_t groups) {
  HostVector<float> sum(slots * part, 0.0f);
  const uint64_t len = quant_block_len(part, groups);
  // Group by group, each code decoded in place: no per-element division for the group and no
  // staging array of codes.
  for (uint64_t b = 0; b < blocks; ++b)
    for (uint64_t s = 0; s < slots; ++s) {
      const uint64_t at = b * slots + s;
      const uint8_t* src = packed + at * part / 2;
      float* dst = sum.data() + s * part;
      for (uint64_t lo = 0; lo < part; lo += len) {
        const float scale = scales[at * groups + lo / len];
        const uint64_t hi = std::min(part, lo + len);
        for (uint64_t i = lo; i < hi; ++i) dst[i] += float(int4_code(src, i)) * scale;
      }
    }
  return sum;
}

void dequantize_int8(Device& device, const void* codes, const void* scales, uint64_t n,
                     uint64_t blocks, uint64_t ranks, void* dst, DType t) {
  if (n == 0) return;
  if (!device.holds_data()) return device.quantizer_pass(QuantPass::kDequantize, ranks * n);
  HostVector<int8_t> q(ranks * n);
  HostVector<float> s(ranks * blocks);
  device.copy_to_host(q.data(), codes, q.size());
  device.copy_to_host(s.data(), scales, s.size() * 4);
  const uint64_t len = quant_block_len(n, blocks);
  HostVector<float> out(ranks * n);
  for (uint64_t r = 0; r < ranks; ++r)
    for (uint64_t b = 0; b < blocks; ++b) {  // a block's scale once, not a division per value
      const float scale = s[r * blocks + b];
      const uint64_t lo = std::min(n, b * len), hi = std::min(n, lo + len);
      for (uint64_t i = lo; i < hi; ++i) out[r * n + i] = float(q[r * n + i]) * scale;
    }
  f32_to_device(device, out.data(), out.size(), dst, t);
}

}  // namespace sb
