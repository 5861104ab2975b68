#include "cpu/norm_cpu.h"

#include <cmath>

#include "cpu/host_elem.h"

namespace oink {
namespace {

using cpu::HostElem;

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
    const double ss = cpu::lane_sum(n, [&](int64_t j) {
      const double v = X::load(src[j]);
      return v * v;
    });
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(n) + a.eps);
    if (a.rstd != nullptr) {  // rmsnorm_forward: float32, or float64 for float64 rows
      if constexpr (XD == DType::kFloat64) {
        static_cast<double*>(a.rstd)[row] = rstd;
      } else {
        static_cast<float*>(a.rstd)[row] = static_cast<float>(rstd);
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      const double w = weight ? W::load(weight[j]) : 1.0;
      out[j] = X::store_result(X::load(src[j]) * rstd * w);
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
    case DType::kFloat64:
      return dispatch_op<XD, DType::kFloat64>(p, a, begin, end);
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
    case DType::kFloat64:
      return dispatch_weight<DType::kFloat64>(p, a, begin, end);
  }
}

}  // namespace oink
