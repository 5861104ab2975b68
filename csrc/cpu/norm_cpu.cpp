#include "cpu/norm_cpu.h"

#include <cmath>

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

namespace oink {
namespace {

template <DType D>
struct HostElem;
template <>
struct HostElem<DType::kFloat32> {
  using Storage = float;
  static OINK_INLINE float load(float v) { return v; }
  static OINK_INLINE float store(float v) { return v; }
};
template <>
struct HostElem<DType::kBFloat16> {
  using Storage = uint16_t;
  static OINK_INLINE float load(uint16_t v) { return bf16_to_float(v); }
  static OINK_INLINE uint16_t store(float v) { return float_to_bf16(v); }
};
template <>
struct HostElem<DType::kFloat16> {
  using Storage = uint16_t;
  static OINK_INLINE float load(uint16_t v) { return half_to_float(v); }
  static OINK_INLINE uint16_t store(float v) { return float_to_half(v); }
};

// Sum of squares in float64: PyTorch's CPU kernels accumulate float32 in double too
// (acc_type<float> on CPU), and GUIDE §2 holds oink to PyTorch's error; a float32 sum with float32
// rsqrt was up to 2.5 ulp worse than F.rms_norm at N = 1536. kLanes independent partial sums
// (element j goes to lane j % kLanes) let the loop vectorise without reassociation flags; the
// lanes combine pairwise. The order depends on N only (batch invariance).
constexpr int kLanes = 16;

template <typename Load>
OINK_INLINE double sum_of_squares(int64_t n, Load load) {
  double lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double v = load(j + l);
      lanes[l] += v * v;
    }
  }
  for (int l = 0; j + l < n; ++l) {
    const double v = load(j + l);
    lanes[l] += v * v;
  }
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

template <DType XD, DType WD, bool kFused>
OINK_INLINE void rows_kernel(const NormProblem& p, const NormArgs& a, int64_t begin, int64_t end) {
  using X = HostElem<XD>;
  using W = HostElem<WD>;
  using XS = typename X::Storage;
  const auto* weight = static_cast<const typename W::Storage*>(a.weight);
  const int64_t n = p.cols;
  const RowIndexer rows(p.row_dims);
  const RowStrides& out_strides = p.written_strides();
  for (int64_t row = begin; row < end; ++row) {
    const RowIndex at = split_row(rows, row);
    const XS* x = static_cast<const XS*>(a.x) + row_offset(rows, at, p.x_strides);
    XS* out = static_cast<XS*>(a.out) + row_offset(rows, at, out_strides);
    // The normalised values come from `src`: x itself, or the updated (rounded) residual.
    const XS* src = x;
    if constexpr (kFused) {
      XS* res = static_cast<XS*>(a.residual) + row_offset(rows, at, p.residual_strides);
      for (int64_t j = 0; j < n; ++j) res[j] = X::store(X::load(x[j]) + X::load(res[j]));
      src = res;
    }
    const double ss = sum_of_squares(n, [&](int64_t j) { return X::load(src[j]); });
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(n) + a.eps);
    for (int64_t j = 0; j < n; ++j) {
      const double w = weight ? W::load(weight[j]) : 1.0;
      out[j] = X::store(static_cast<float>(X::load(src[j]) * rstd * w));
    }
  }
}

template <DType XD, DType WD>
OINK_INLINE void dispatch_op(const NormProblem& p, const NormArgs& a, int64_t begin, int64_t end) {
  if (p.op == NormOp::kFusedAddRmsNorm) {
    rows_kernel<XD, WD, true>(p, a, begin, end);
  } else {
    rows_kernel<XD, WD, false>(p, a, begin, end);
  }
}

template <DType XD>
OINK_INLINE void dispatch_weight(const NormProblem& p, const NormArgs& a, int64_t begin,
                                 int64_t end) {
  // Without a weight the weight type is irrelevant; use x's.
  switch (p.has_weight ? p.w_dtype : XD) {
    case DType::kFloat32:
      return dispatch_op<XD, DType::kFloat32>(p, a, begin, end);
    case DType::kBFloat16:
      return dispatch_op<XD, DType::kBFloat16>(p, a, begin, end);
    case DType::kFloat16:
      return dispatch_op<XD, DType::kFloat16>(p, a, begin, end);
  }
}

}  // namespace

OINK_CPU_CLONES void norm_rows_cpu(const NormProblem& p, const NormArgs& a, int64_t begin,
                                   int64_t end) {
  switch (p.x_dtype) {
    case DType::kFloat32:
      return dispatch_weight<DType::kFloat32>(p, a, begin, end);
    case DType::kBFloat16:
      return dispatch_weight<DType::kBFloat16>(p, a, begin, end);
    case DType::kFloat16:
      return dispatch_weight<DType::kFloat16>(p, a, begin, end);
  }
}

}  // namespace oink
