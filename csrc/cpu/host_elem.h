// What the CPU kernels share: element loads and stores per dtype, and the fixed-order sums.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/float_convert.h"

// x86-64: the row loops are compiled three times (AVX-512, AVX2 + FMA + F16C, baseline) and the
// loader picks the best the CPU runs (GCC function multi-versioning). Every clone performs
// the same IEEE operations in the same order (no fast-math; -ffp-contract=off), so results do not
// depend on the clone. Elsewhere (other CPUs, other compilers, GCC < 12): one portable build.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define OINK_CPU_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define OINK_CPU_CLONES
#endif
#define OINK_INLINE inline __attribute__((always_inline))

namespace oink::cpu {

// load: the element widened (float, or double for float64); store: a value of that width rounded
// to the element; store_result: a float64 result rounded to the element as the kernels round
// their outputs (through float32 for the 16-bit and float32 types, as the CUDA kernels' float32
// arithmetic ends; float64 kept).
template <DType D>
struct HostElem;
template <>
struct HostElem<DType::kFloat32> {
  using Storage = float;
  static OINK_INLINE float load(float v) { return v; }
  static OINK_INLINE float store(float v) { return v; }
  static OINK_INLINE float store_result(double v) { return static_cast<float>(v); }
};
// The 16-bit types: stored as their bits, converted by exact host conversions.
template <float (*kLoad)(uint16_t), uint16_t (*kStore)(float)>
struct Host16 {
  using Storage = uint16_t;
  static OINK_INLINE float load(uint16_t v) { return kLoad(v); }
  static OINK_INLINE uint16_t store(float v) { return kStore(v); }
  static OINK_INLINE uint16_t store_result(double v) { return store(static_cast<float>(v)); }
};
template <>
struct HostElem<DType::kBFloat16> : Host16<bf16_to_float, float_to_bf16> {};
template <>
struct HostElem<DType::kFloat16> : Host16<half_to_float, float_to_half> {};
template <>
struct HostElem<DType::kFloat64> {
  using Storage = double;
  static OINK_INLINE double load(double v) { return v; }
  static OINK_INLINE double store(double v) { return v; }
  static OINK_INLINE double store_result(double v) { return v; }
};

// A statistic saved per row (rstd, mean): float32, or float64 for float64 rows.
template <DType XD>
OINK_INLINE void store_stat(void* stats, int64_t row, double v) {
  if (stats == nullptr) return;
  if constexpr (XD == DType::kFloat64) {
    static_cast<double*>(stats)[row] = v;
  } else {
    static_cast<float*>(stats)[row] = static_cast<float>(v);
  }
}

template <DType XD>
OINK_INLINE double load_stat(const void* stats, int64_t row) {
  if constexpr (XD == DType::kFloat64) {
    return static_cast<const double*>(stats)[row];
  } else {
    return static_cast<const float*>(stats)[row];
  }
}

// Calls f(std::integral_constant<DType, D>{}) for D = `dtype`: one switch over the element types
// for every kernel entry that instantiates a row loop per dtype.
template <typename F>
OINK_INLINE void with_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(std::integral_constant<DType, DType::kFloat32>{});
    case DType::kBFloat16:
      return f(std::integral_constant<DType, DType::kBFloat16>{});
    case DType::kFloat16:
      return f(std::integral_constant<DType, DType::kFloat16>{});
    case DType::kFloat64:
      return f(std::integral_constant<DType, DType::kFloat64>{});
  }
}

// Sums in float64: PyTorch's CPU kernels accumulate float32 in double too (acc_type<float> on
// CPU), and docs/contract.md ('How correctness is measured') holds oink to PyTorch's error; a
// float32 sum with float32 rsqrt was up to 2.5 ulp worse than F.rms_norm at N = 1536. kLanes
// independent partial sums (term j goes to lane j % kLanes) let the loop vectorise without
// reassociation flags; the lanes combine pairwise. The order depends on N only (batch invariance).
constexpr int kLanes = 16;

template <typename Term>
OINK_INLINE double lane_sum(int64_t n, Term term) {
  double lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += term(j + l);
  }
  for (int l = 0; j + l < n; ++l) lanes[l] += term(j + l);
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

}  // namespace oink::cpu
