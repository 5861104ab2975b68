// float <-> float16 / bfloat16 conversions of core/float_convert.h against references computed
// from the IEEE 754 definitions in double arithmetic (independent of the bit tricks under test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>

#include "core/float_convert.h"

namespace oink {
namespace {

// A 16-bit binary format: sign, `exp_bits` exponent bits, `mant_bits` stored mantissa bits.
struct Format {
  int exp_bits;
  int mant_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int emin() const { return 1 - bias(); }
  uint16_t inf() const { return static_cast<uint16_t>(((1 << exp_bits) - 1) << mant_bits); }
};
void PrintTo(const Format& f, std::ostream* os) {
  *os << (f.mant_bits == 10 ? "float16" : "bfloat16");
}
constexpr Format kHalf{5, 10};
constexpr Format kBf16{8, 7};

// The value of bit pattern `h` (exact in double).
double decode(Format fmt, uint16_t h) {
  const int exp = (h >> fmt.mant_bits) & ((1 << fmt.exp_bits) - 1);
  const int mant = h & ((1 << fmt.mant_bits) - 1);
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == (1 << fmt.exp_bits) - 1) return mant ? NAN : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(mant, fmt.emin() - fmt.mant_bits);
  return sign * std::ldexp(mant + (1 << fmt.mant_bits), exp - fmt.bias() - fmt.mant_bits);
}

// Round-to-nearest-even of a non-NaN float into `fmt`. Exact: a float has 24 significant bits, so
// its quotient by a power-of-two ulp, and that quotient's fractional part, are exact in double.
uint16_t encode_rne(Format fmt, float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return sign | fmt.inf();
  int e = a >= std::ldexp(1.0, fmt.emin()) ? std::ilogb(a) : fmt.emin();
  const double ulp = std::ldexp(1.0, e - fmt.mant_bits);
  double q = std::floor(a / ulp);
  const double rest = a / ulp - q;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(q, 2.0) == 1.0)) q += 1.0;
  const double one = std::ldexp(1.0, fmt.mant_bits);  // the implicit leading bit
  if (q == 2 * one) {                                 // rounded up into the next binade
    ++e;
    q = one;
  }
  if (q < one) return sign | static_cast<uint16_t>(q);  // subnormal or zero (e == emin)
  const int field = e + fmt.bias();
  if (field >= (1 << fmt.exp_bits) - 1) return sign | fmt.inf();
  return sign | static_cast<uint16_t>((field << fmt.mant_bits) | static_cast<int>(q - one));
}

bool is_nan(Format fmt, uint16_t h) { return (h & 0x7fff) > fmt.inf(); }

float to_float(Format fmt, uint16_t h) {
  return fmt.mant_bits == kHalf.mant_bits ? half_to_float(h) : bf16_to_float(h);
}
uint16_t from_float(Format fmt, float f) {
  return fmt.mant_bits == kHalf.mant_bits ? float_to_half(f) : float_to_bf16(f);
}

class FloatConvert : public ::testing::TestWithParam<Format> {};

TEST_P(FloatConvert, DecodeMatchesDefinitionForAllPatterns) {
  const Format fmt = GetParam();
  for (uint32_t i = 0; i < 0x10000; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = to_float(fmt, h);
    const double want = decode(fmt, h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
      ASSERT_EQ(std::signbit(f), std::signbit(want)) << std::hex << h;
    }
  }
}

TEST_P(FloatConvert, RoundTripsAllPatterns) {
  const Format fmt = GetParam();
  for (uint32_t i = 0; i < 0x10000; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const uint16_t back = from_float(fmt, to_float(fmt, h));
    if (is_nan(fmt, h)) {
      ASSERT_TRUE(is_nan(fmt, back)) << std::hex << h << " -> " << back;
    } else {
      ASSERT_EQ(back, h);
    }
  }
}

// Every midpoint between two neighbouring finite values (including the one between the largest
// finite value and the overflow threshold) is exactly representable in float: it must round to the
// even neighbour, and the floats on either side of it to the nearer neighbour.
TEST_P(FloatConvert, RoundsEveryMidpointToEven) {
  const Format fmt = GetParam();
  for (uint32_t sign : {0u, 0x8000u}) {
    for (uint32_t mag = 0; mag < fmt.inf(); ++mag) {
      const uint16_t lo = static_cast<uint16_t>(sign | mag);
      const uint16_t hi = static_cast<uint16_t>(lo + 1);
      const double lo_v = decode(fmt, lo);
      const double hi_v = hi == (sign | fmt.inf())
                              ? std::copysign(std::ldexp(1.0, fmt.bias() + 1), lo_v)
                              : decode(fmt, hi);
      const float mid = static_cast<float>((lo_v + hi_v) / 2);
      ASSERT_EQ(static_cast<double>(mid), (lo_v + hi_v) / 2) << "midpoint not exact";
      ASSERT_EQ(from_float(fmt, mid), (lo & 1) ? hi : lo) << std::hex << lo;
      ASSERT_EQ(from_float(fmt, std::nextafter(mid, static_cast<float>(lo_v))), lo)
          << std::hex << lo;
      ASSERT_EQ(from_float(fmt, std::nextafter(mid, static_cast<float>(2 * hi_v))), hi)
          << std::hex << lo;
    }
  }
}

// Random floats: half of them uniform over all 2^32 bit patterns (NaN, Inf, huge, subnormal),
// half with exponents near the 16-bit formats' ranges, where the rounding work is.
TEST_P(FloatConvert, RandomFloatsRoundToNearestEven) {
  const Format fmt = GetParam();
  std::mt19937 gen(fmt.mant_bits);
  std::uniform_int_distribution<uint32_t> any_bits;
  const int lo_exp = fmt.emin() - fmt.mant_bits - 3, hi_exp = fmt.bias() + 3;
  std::uniform_int_distribution<int> exponent(lo_exp + 127, hi_exp + 127);
  int failures = 0;
  for (int i = 0; i < 4'000'000 && failures < 10; ++i) {
    uint32_t u = any_bits(gen);
    if (i % 2) {
      u = (u & 0x807fffffu) | (static_cast<uint32_t>(std::clamp(exponent(gen), 0, 255)) << 23);
    }
    const float f = bits_float(u);
    const uint16_t got = from_float(fmt, f);
    const bool ok = std::isnan(f) ? is_nan(fmt, got) : got == encode_rne(fmt, f);
    if (!ok) {
      ++failures;
      ADD_FAILURE() << "float bits " << std::hex << u << " -> " << got << ", expected "
                    << (std::isnan(f) ? uint16_t{0x7fff} : encode_rne(fmt, f));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, FloatConvert, ::testing::Values(kHalf, kBf16),
                         [](const ::testing::TestParamInfo<Format>& info) {
                           return info.param.mant_bits == 10 ? "Half" : "BFloat16";
                         });

TEST(FloatToHalf, EdgeCases) {
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);  // largest finite half
  EXPECT_EQ(float_to_half(65519.99f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // halfway to 2^16, ties to even: overflow
  EXPECT_EQ(float_to_half(-65520.0f), 0xfc00);
  EXPECT_EQ(float_to_half(FLT_MAX), 0x7c00);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // halfway, ties to even (0)
  EXPECT_EQ(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_half(3 * std::ldexp(1.0f, -25)), 0x0002);  // halfway, ties to even (2)
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), 0x0400);      // smallest normal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)), 0x0400);
  EXPECT_EQ(float_to_half(1e-30f), 0x0000);
  EXPECT_EQ(float_to_half(-1e-30f), 0x8000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(INFINITY), 0x7c00);
  EXPECT_EQ(float_to_half(-INFINITY), 0xfc00);
  EXPECT_TRUE(is_nan(kHalf, float_to_half(NAN)));
  EXPECT_TRUE(is_nan(kHalf, float_to_half(-NAN)));
  EXPECT_TRUE(is_nan(kHalf, float_to_half(bits_float(0x7f800001u))));  // payload in low bits only
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)));
}

TEST(FloatToBf16, EdgeCases) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // halfway, ties to even
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // halfway, ties to even
  EXPECT_EQ(float_to_bf16(bits_float(0x7f7f7fffu)), 0x7f7f);          // just below the midpoint
  EXPECT_EQ(float_to_bf16(FLT_MAX), 0x7f80);                          // above it: overflow
  EXPECT_EQ(float_to_bf16(-FLT_MAX), 0xff80);
  EXPECT_EQ(float_to_bf16(std::ldexp(1.0f, -133)), 0x0001);  // smallest bf16 subnormal
  EXPECT_EQ(float_to_bf16(std::ldexp(1.0f, -149)), 0x0000);  // smallest float subnormal
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(float_to_bf16(-INFINITY), 0xff80);
  EXPECT_TRUE(is_nan(kBf16, float_to_bf16(NAN)));
  EXPECT_TRUE(is_nan(kBf16, float_to_bf16(bits_float(0x7f800001u))));  // must not become Inf
  EXPECT_TRUE(is_nan(kBf16, float_to_bf16(bits_float(0xffffffffu))));  // must not wrap around
}

}  // namespace
}  // namespace oink
