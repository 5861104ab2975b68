// Bit-exact float <-> float16 / bfloat16 conversions for host code (round to nearest even, NaN
// kept quiet), so that the CPU kernels and C++ tests need neither CUDA nor torch headers.
#pragma once

#include <cstdint>
#include <cstring>

namespace oink {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // Inf / NaN
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  // Subnormal (or zero): value = mant * 2^-24, exact in float.
  const float magnitude = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -magnitude : magnitude;
}

inline uint16_t float_to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((abs >> 13) & 0x3ffu);
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: Inf
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: scale so the half ulp (2^-24) becomes 1, round to nearest even.
    const float scaled = bits_float(abs) * 16777216.0f;  // exact: power-of-two scaling
    const uint32_t whole = static_cast<uint32_t>(scaled);
    const float frac = scaled - static_cast<float>(whole);
    uint32_t q = whole;
    if (frac > 0.5f || (frac == 0.5f && (whole & 1u))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  const uint32_t rebased = abs - 0x38000000u;  // exponent 127 -> 15
  const uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  return sign | static_cast<uint16_t>((rebased + rounding) >> 13);
}

}  // namespace oink
