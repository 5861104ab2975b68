// cross_entropy, cross_entropy_backward and scale_gradient_ on the CPU (core/row_reduce.h, the
// semantics of each op: the family's specification). float64 math, each output rounded once; the
// row's sums in lane_sum's order, fixed by V. Per-row values (loss, lse, dloss, the gradient's
// scale) are float32, float64 for float64 rows.
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

// The options of one call, as the kernels use them.
struct CeOptions {
  bool softcap;    // z = c * tanh(x / c)
  double c;        // the softcap
  double eps;      // label smoothing (0 without it)
  double eps_v;    // eps / V
  bool smoothing;  // the sum of z is reduced too
};

CeOptions options_of(const ReduceProblem& p, const ReduceArgs& a) {
  CeOptions o;
  o.softcap = p.softcap;
  o.c = static_cast<double>(a.softcap);
  o.smoothing = p.label_smoothing;
  o.eps = p.label_smoothing ? static_cast<double>(a.label_smoothing) : 0.0;
  const double v = static_cast<double>(p.cols);
  o.eps_v = o.eps / v;
  return o;
}

OINK_INLINE double capped(const CeOptions& o, double x) {
  return o.softcap ? o.c * std::tanh(x / o.c) : x;
}

// g_j = (exp(z_j - lse) - (1 - eps) [j == t] - eps / V) * scale * (softcap ? 1 - (z_j / c)^2 : 1)
OINK_INLINE double gradient(const CeOptions& o, double z, bool is_target, double lse,
                            double scale) {
  double g = std::exp(z - lse);
  if (is_target) g -= 1.0 - o.eps;
  if (o.smoothing) g -= o.eps_v;
  g *= scale;
  if (o.softcap) {
    const double r = z / o.c;
    g *= 1.0 - r * r;
  }
  return g;
}

// *grad_scale (float32, float64 for float64 rows, or the rows' dtype where it says so), 1 without
// one.
template <DType D>
OINK_INLINE double scale_of(const ReduceArgs& a) {
  if (a.grad_scale == nullptr) return 1.0;
  if (a.grad_scale_in_rows_dtype) {
    using X = HostElem<D>;
    return X::load(*static_cast<const typename X::Storage*>(a.grad_scale));
  }
  return cpu::load_stat<D>(a.grad_scale, 0);
}

// Ignored rows are 0, rows of an out-of-range target NaN.
template <DType D>
OINK_INLINE void fill_row(typename HostElem<D>::Storage* g, int64_t n, double v) {
  for (int64_t j = 0; j < n; ++j) g[j] = HostElem<D>::store_result(v);
}

// Per row: (max, sum exp) of z, lse, the loss and (writes_rows) the fused gradient, scaled by
// *grad_scale. `z` holds the row's capped logits (V doubles): the row may be written in place.
template <DType D>
OINK_INLINE void forward_kernel(const ReduceProblem& p, const ReduceArgs& a, double* z,
                                int64_t begin, int64_t end) {
  using X = HostElem<D>;
  using S = typename X::Storage;
  const CeOptions o = options_of(p, a);
  const int64_t n = p.cols;
  const bool writes = p.writes_rows;
  const double scale = writes ? scale_of<D>(a) : 0.0;
  const RowIndexer rows(p.row_dims);
  for (int64_t row = begin; row < end; ++row) {
    const RowIndex at = split_row(rows, row);
    const S* x = static_cast<const S*>(a.in) + row_offset(rows, at, p.in_strides);
    S* g = writes ? static_cast<S*>(a.out) + row_offset(rows, at, p.out_strides) : nullptr;
    double m = kNegInf;
    for (int64_t j = 0; j < n; ++j) {
      z[j] = capped(o, X::load(x[j]));
      m = z[j] > m ? z[j] : m;
    }
    // An all -inf row: the empty combination (max -inf, sum 0), lse -inf.
    const double s =
        m == kNegInf ? 0.0 : cpu::lane_sum(n, [&](int64_t j) { return std::exp(z[j] - m); });
    const double lse = m + std::log(s);
    cpu::store_stat<D>(a.lse, row, lse);
    const int64_t t = a.target[row];
    if (t == a.ignore_index) {
      cpu::store_stat<D>(a.loss, row, 0.0);
      if (writes) fill_row<D>(g, n, 0.0);
      continue;
    }
    if (t < 0 || t >= n) {  // never read: logits[row, t] is out of bounds
      cpu::store_stat<D>(a.loss, row, kNaN);
      if (writes) fill_row<D>(g, n, kNaN);
      continue;
    }
    const double zt = capped(o, X::load(x[t]));  // one load, before the row is written
    double loss = lse - (1.0 - o.eps) * zt;
    if (o.smoothing) loss -= o.eps_v * cpu::lane_sum(n, [&](int64_t j) { return z[j]; });
    cpu::store_stat<D>(a.loss, row, loss);
    if (writes) {
      for (int64_t j = 0; j < n; ++j) g[j] = X::store_result(gradient(o, z[j], j == t, lse, scale));
    }
  }
}

// No reduction: the forward's lse and dloss[row] give each row's gradient.
template <DType D>
OINK_INLINE void backward_kernel(const ReduceProblem& p, const ReduceArgs& a, int64_t begin,
                                 int64_t end) {
  using X = HostElem<D>;
  using S = typename X::Storage;
  const CeOptions o = options_of(p, a);
  const int64_t n = p.cols;
  const RowIndexer rows(p.row_dims);
  for (int64_t row = begin; row < end; ++row) {
    const RowIndex at = split_row(rows, row);
    const S* x = static_cast<const S*>(a.in) + row_offset(rows, at, p.in_strides);
    S* g = static_cast<S*>(a.out) + row_offset(rows, at, p.out_strides);
    const int64_t t = a.target[row];
    if (t == a.ignore_index) {
      fill_row<D>(g, n, 0.0);
      continue;
    }
    if (t < 0 || t >= n) {
      fill_row<D>(g, n, kNaN);
      continue;
    }
    const double lse = cpu::load_stat<D>(a.lse, row);
    const double scale = cpu::load_stat<D>(a.dloss, row);
    for (int64_t j = 0; j < n; ++j) {
      g[j] = X::store_result(gradient(o, capped(o, X::load(x[j])), j == t, lse, scale));
    }
  }
}

// scale_gradient_: g *= s in place, each element rounded once; nothing is touched where s == 1.
template <DType D>
OINK_INLINE void scale_kernel(const ReduceProblem& p, const ReduceArgs& a, int64_t begin,
                              int64_t end) {
  using X = HostElem<D>;
  using S = typename X::Storage;
  const double s = scale_of<D>(a);
  if (s == 1.0) return;
  const RowIndexer rows(p.row_dims);
  for (int64_t row = begin; row < end; ++row) {
    S* g = static_cast<S*>(a.out) + row_offset(rows, split_row(rows, row), p.out_strides);
    for (int64_t j = 0; j < p.cols; ++j) {
      g[j] = X::store_result(static_cast<double>(X::load(g[j])) * s);
    }
  }
}

template <DType D>
OINK_INLINE void dispatch_op(const ReduceProblem& p, const ReduceArgs& a, double* z, int64_t begin,
                             int64_t end) {
  if (p.op == ReduceOp::kScaleGradient) {
    scale_kernel<D>(p, a, begin, end);
  } else if (p.op == ReduceOp::kCrossEntropyBackward) {
    backward_kernel<D>(p, a, begin, end);
  } else {
    forward_kernel<D>(p, a, z, begin, end);
  }
}

OINK_CPU_CLONES void cross_entropy_rows_impl(const ReduceProblem& p, const ReduceArgs& a, double* z,
                                             int64_t begin, int64_t end) {
  switch (p.dtype) {
    case DType::kFloat32:
      return dispatch_op<DType::kFloat32>(p, a, z, begin, end);
    case DType::kBFloat16:
      return dispatch_op<DType::kBFloat16>(p, a, z, begin, end);
    case DType::kFloat16:
      return dispatch_op<DType::kFloat16>(p, a, z, begin, end);
    case DType::kFloat64:
      return dispatch_op<DType::kFloat64>(p, a, z, begin, end);
  }
}

}  // namespace

namespace cpu {

void cross_entropy_rows(const ReduceProblem& problem, const ReduceArgs& args, int64_t begin,
                        int64_t end) {
  if (begin >= end) return;
  std::vector<double> z(problem.op == ReduceOp::kCrossEntropy ? problem.cols : 0);
  cross_entropy_rows_impl(problem, args, z.data(), begin, end);
}

}  // namespace cpu
}  // namespace oink
