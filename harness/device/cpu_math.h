// The CPU device's exp, shared by its GPT (cpu_device.cc) and Llama (cpu_llama_ops.cc) kernels.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

namespace sb {

// expf for the softmaxes, GELU and SiLU: Cephes' range reduction + degree-6 polynomial (~1 ulp).
// glibc's expf is a call, which stops the loops around it from vectorising; so does std::floor
// under the default -fmath-errno, hence rounding by adding and subtracting 1.5 * 2^23.
inline float fast_exp(float x) {
  x = std::clamp(x, -87.0f, 88.0f);
  constexpr float kRound = 12582912.0f;
  const float n = (x * 1.44269504088896341f + kRound) - kRound;  // nearest integer
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;  // ln2 split in two for accuracy
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((int32_t(n) + 127) << 23);
}

}  // namespace sb
