// softmax and softmax_backward on the CPU (core/row_reduce.h, the semantics of each op: the
// family's specification). float64 math, each output rounded once; the row's sum in lane_sum's
// order, fixed by N.
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/host_elem.h"
#include "cpu/row_reduce_cpu.h"

namespace oink {
namespace {

using cpu::HostElem;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// y = exp(x - max) / sum(exp(x - max)). An all -inf row has max -inf and sum 0 (the empty
// combination): NaN, as torch.softmax. A NaN drops out of the max but not out of the sum, so a
// row holding one is NaN throughout. `e` holds the row's exponentials (N doubles): computed once,
// and the row may be written in place.
template <DType D>
OINK_INLINE void softmax_kernel(const ReduceProblem& p, const ReduceArgs& a, double* e,
                                int64_t begin, int64_t end) {
  using X = HostElem<D>;
  using S = typename X::Storage;
  const int64_t n = p.cols;
  const RowIndexer rows(p.row_dims);
  for (int64_t row = begin; row < end; ++row) {
    const RowIndex at = split_row(rows, row);
    const S* x = static_cast<const S*>(a.in) + row_offset(rows, at, p.in_strides);
    S* y = static_cast<S*>(a.out) + row_offset(rows, at, p.out_strides);
    double m = kNegInf;
    for (int64_t j = 0; j < n; ++j) {
      const double v = X::load(x[j]);
      m = v > m ? v : m;
    }
    if (m == kNegInf) {
      for (int64_t j = 0; j < n; ++j) y[j] = X::store_result(kNaN);
      continue;
    }
    for (int64_t j = 0; j < n; ++j) e[j] = std::exp(X::load(x[j]) - m);
    const double s = cpu::lane_sum(n, [&](int64_t j) { return e[j]; });
    for (int64_t j = 0; j < n; ++j) y[j] = X::store_result(e[j] / s);
  }
}

// dx = y * (dy - sum(dy * y)); in = dy, in2 = y, out = dx (may be dy itself).
template <DType D>
OINK_INLINE void softmax_backward_kernel(const ReduceProblem& p, const ReduceArgs& a, int64_t begin,
                                         int64_t end) {
  using X = HostElem<D>;
  using S = typename X::Storage;
  const int64_t n = p.cols;
  const RowIndexer rows(p.row_dims);
  for (int64_t row = begin; row < end; ++row) {
    const RowIndex at = split_row(rows, row);
    const S* dy = static_cast<const S*>(a.in) + row_offset(rows, at, p.in_strides);
    const S* y = static_cast<const S*>(a.in2) + row_offset(rows, at, p.in2_strides);
    S* dx = static_cast<S*>(a.out) + row_offset(rows, at, p.out_strides);
    const double dot = cpu::lane_sum(n, [&](int64_t j) {
      return static_cast<double>(X::load(dy[j])) * static_cast<double>(X::load(y[j]));
    });
    for (int64_t j = 0; j < n; ++j) {
      const double yj = X::load(y[j]);
      dx[j] = X::store_result(yj * (static_cast<double>(X::load(dy[j])) - dot));
    }
  }
}

template <DType D>
OINK_INLINE void dispatch_op(const ReduceProblem& p, const ReduceArgs& a, double* e, int64_t begin,
                             int64_t end) {
  if (p.op == ReduceOp::kSoftmaxBackward) {
    softmax_backward_kernel<D>(p, a, begin, end);
  } else {
    softmax_kernel<D>(p, a, e, begin, end);
  }
}

OINK_CPU_CLONES void softmax_rows_impl(const ReduceProblem& p, const ReduceArgs& a, double* e,
                                       int64_t begin, int64_t end) {
  switch (p.dtype) {
    case DType::kFloat32:
      return dispatch_op<DType::kFloat32>(p, a, e, begin, end);
    case DType::kBFloat16:
      return dispatch_op<DType::kBFloat16>(p, a, e, begin, end);
    case DType::kFloat16:
      return dispatch_op<DType::kFloat16>(p, a, e, begin, end);
    case DType::kFloat64:
      return dispatch_op<DType::kFloat64>(p, a, e, begin, end);
  }
}

}  // namespace

namespace cpu {

void softmax_rows(const ReduceProblem& problem, const ReduceArgs& args, int64_t begin,
                  int64_t end) {
  if (begin >= end || problem.cols <= 0) return;
  std::vector<double> exps(problem.op == ReduceOp::kSoftmax ? problem.cols : 0);
  softmax_rows_impl(problem, args, exps.data(), begin, end);
}

}  // namespace cpu
}  // namespace oink
