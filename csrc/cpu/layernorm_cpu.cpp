#include "cpu/layernorm_cpu.h"

#include <algorithm>
#include <cmath>

#include "cpu/host_elem.h"
#include "cpu/norm_backward_cpu.h"

namespace oink {
namespace {

using cpu::HostElem;

template <DType XD>
OINK_INLINE void forward_rows(const NormProblem& p, const LayerNormArgs& a, int64_t begin,
                              int64_t end) {
  using X = HostElem<XD>;
  using XS = typename X::Storage;
  const int64_t n = p.cols;
  const RowIndexer rows(p.row_dims);
  for (int64_t row = begin; row < end; ++row) {
    const RowIndex at = split_row(rows, row);
    const XS* x = static_cast<const XS*>(a.x) + row_offset(rows, at, p.x_strides);
    XS* out = static_cast<XS*>(a.out) + row_offset(rows, at, p.out_strides);
    const double mean =
        cpu::lane_sum(n, [&](int64_t j) { return static_cast<double>(X::load(x[j])); }) /
        static_cast<double>(n);
    const double var = cpu::lane_sum(n,
                                     [&](int64_t j) {
                                       const double d = X::load(x[j]) - mean;
                                       return d * d;
                                     }) /
                       static_cast<double>(n);
    const double rstd = 1.0 / std::sqrt(var + a.eps);
    cpu::store_stat<XD>(a.mean, row, mean);
    cpu::store_stat<XD>(a.rstd, row, rstd);
    for (int64_t j = 0; j < n; ++j) {
      double y = (X::load(x[j]) - mean) * rstd;
      if (a.weight != nullptr) y *= a.weight[j];
      if (a.bias != nullptr) y += a.bias[j];
      out[j] = X::store_result(y);
    }
  }
}

// xhat = (x - mean) * rstd, g = dy * weight:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
//   dweight = sum over rows of dy * xhat,   dbias = sum over rows of dy.
template <DType XD>
OINK_INLINE void backward_block(const NormBackwardProblem& bp, const LayerNormBackwardArgs& a,
                                int64_t block) {
  using X = HostElem<XD>;
  using XS = typename X::Storage;
  const NormProblem& p = bp.rows;
  const int64_t n = p.cols;
  double* dw = a.dweight_partials != nullptr ? a.dweight_partials + block * n : nullptr;
  double* db = a.dbias_partials != nullptr ? a.dbias_partials + block * n : nullptr;
  if (dw != nullptr) std::fill(dw, dw + n, 0.0);
  if (db != nullptr) std::fill(db, db + n, 0.0);
  for_each_block_row<XS>(
      bp, a.x, a.dy, a.dx, block, [&](int64_t row, const XS* x, const XS* dy, XS* dx) {
        const double mean = cpu::load_stat<XD>(a.mean, row), rstd = cpu::load_stat<XD>(a.rstd, row);
        auto xhat = [&](int64_t j) { return (X::load(x[j]) - mean) * rstd; };
        auto g = [&](int64_t j) {
          const double d = X::load(dy[j]);
          return a.weight != nullptr ? d * a.weight[j] : d;
        };
        const double inv_n = 1.0 / static_cast<double>(n);
        const double mean_g = cpu::lane_sum(n, g) * inv_n;
        const double mean_gx = cpu::lane_sum(n, [&](int64_t j) { return g(j) * xhat(j); }) * inv_n;
        for (int64_t j = 0; j < n; ++j) {
          dx[j] = X::store_result(rstd * (g(j) - mean_g - xhat(j) * mean_gx));
        }
        for (int64_t j = 0; dw != nullptr && j < n; ++j) dw[j] += X::load(dy[j]) * xhat(j);
        for (int64_t j = 0; db != nullptr && j < n; ++j) db[j] += X::load(dy[j]);
      });
}

}  // namespace

OINK_CPU_CLONES void layernorm_rows_cpu(const NormProblem& p, const LayerNormArgs& a, int64_t begin,
                                        int64_t end) {
  cpu::with_dtype(p.x_dtype, [&](auto x) { forward_rows<decltype(x)::value>(p, a, begin, end); });
}

OINK_CPU_CLONES void layernorm_backward_block_cpu(const NormBackwardProblem& bp,
                                                  const LayerNormBackwardArgs& a, int64_t block) {
  cpu::with_dtype(bp.rows.x_dtype,
                  [&](auto x) { backward_block<decltype(x)::value>(bp, a, block); });
}

}  // namespace oink
