// Element types that the suite stores and communicates, and the bf16 <-> fp32 conversions.
// bf16 rounding is round-to-nearest-even, as PyTorch and CUDA's __float2bfloat16 do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sb {

// kI8: int8 codes of a quantised collective (ZeRO++'s qwZ/qgZ payloads); moved, never summed.
enum class DType : uint8_t { kF32, kBF16, kI8 };

constexpr size_t dtype_bytes(DType t) { return t == DType::kF32 ? 4 : t == DType::kBF16 ? 2 : 1; }
constexpr const char* dtype_name(DType t) {
  return t == DType::kF32 ? "fp32" : t == DType::kBF16 ? "bf16" : "int8";
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return uint16_t((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace sb
