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

// float16 conversions written without branches (every case computed, then selected), so that
// loops over rows vectorise; the exhaustive tests in tests/cpp/test_float_convert.cpp hold them to
// round-to-nearest-even on every pattern.
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7fffu;
  // Normal: move exponent and mantissa into place, rebias 15 -> 127; Inf/NaN: exponent 255.
  uint32_t bits = (magnitude << 13) + 0x38000000u;
  bits = magnitude >= 0x7c00u ? bits + 0x38000000u : bits;
  // Subnormal (or zero): value = mantissa * 2^-24, exact in float.
  const float subnormal =
      static_cast<float>(static_cast<int32_t>(magnitude)) * 5.9604644775390625e-8f;
  const float value = magnitude < 0x0400u ? subnormal : bits_float(bits);
  return bits_float(float_bits(value) | sign);
}

inline uint16_t float_to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  // NaN: quiet, top mantissa bits kept.
  const uint32_t nan = 0x7e00u | ((abs >> 13) & 0x3ffu);
  // Subnormal result: adding 0.5 (whose ulp is the half ulp, 2^-24) makes the FPU round to
  // nearest even; the low bits of the sum are the half's mantissa (0x400: the smallest normal).
  const uint32_t subnormal = float_bits(bits_float(abs) + 0.5f) - 0x3f000000u;
  // Normal: rebias 127 -> 15, round the 13 dropped mantissa bits to nearest even.
  const uint32_t normal = (abs - 0x38000000u + 0xfffu + ((abs >> 13) & 1u)) >> 13;
  uint32_t h = abs < 0x38800000u ? subnormal : normal;
  h = abs >= 0x477ff000u ? 0x7c00u : h;  // rounds to >= 65520: Inf
  h = abs > 0x7f800000u ? nan : h;
  return static_cast<uint16_t>(h | sign);
}

}  // namespace oink
