#include "cpu/norm_backward_cpu.h"

#include <algorithm>

#include "cpu/host_elem.h"

namespace oink {
namespace {

using cpu::HostElem;

// y = x * r * w with r = 1 / sqrt(mean(x^2) + eps), so for g = dy * w:
//   dx = r * g - x * r^3 * sum(g * x) / N,   dweight = sum over rows of dy * x * r.
// Every product and sum in float64, each output rounded once.
template <DType XD, DType WD>
OINK_INLINE void block_kernel(const NormBackwardProblem& bp, const NormBackwardArgs& a,
                              int64_t block) {
  using X = HostElem<XD>;
  using W = HostElem<WD>;
  using XS = typename X::Storage;
  const NormProblem& p = bp.rows;
  const int64_t n = p.cols;
  const auto* weight = static_cast<const typename W::Storage*>(a.weight);
  double* partial = a.dweight_partials != nullptr ? a.dweight_partials + block * n : nullptr;
  if (partial != nullptr) std::fill(partial, partial + n, 0.0);
  for_each_block_row<XS>(
      bp, a.x, a.dy, a.dx, block, [&](int64_t row, const XS* x, const XS* dy, XS* dx) {
        const double r = cpu::load_stat<XD>(a.rstd, row);
        auto g = [&](int64_t j) {
          const double d = X::load(dy[j]);
          return weight != nullptr ? d * static_cast<double>(W::load(weight[j])) : d;
        };
        const double dot = cpu::lane_sum(n, [&](int64_t j) { return g(j) * X::load(x[j]); });
        const double c = r * r * r * dot / static_cast<double>(n);
        for (int64_t j = 0; j < n; ++j) dx[j] = X::store_result(r * g(j) - c * X::load(x[j]));
        if (partial != nullptr) {
          for (int64_t j = 0; j < n; ++j) {
            partial[j] += static_cast<double>(X::load(dy[j])) * X::load(x[j]) * r;
          }
        }
      });
}

template <DType WD>
OINK_INLINE void reduce_kernel(const double* partials, int64_t blocks, int64_t n, void* dweight,
                               int64_t begin, int64_t end) {
  using W = HostElem<WD>;
  auto* out = static_cast<typename W::Storage*>(dweight);
  for (int64_t j = begin; j < end; ++j) {
    double sum = 0.0;
    for (int64_t b = 0; b < blocks; ++b) sum += partials[b * n + j];
    out[j] = W::store_result(sum);
  }
}

}  // namespace

OINK_CPU_CLONES void norm_backward_block_cpu(const NormBackwardProblem& bp,
                                             const NormBackwardArgs& a, int64_t block) {
  const NormProblem& p = bp.rows;
  // Without a weight the weight type is irrelevant: x's.
  cpu::with_dtype(p.x_dtype, [&](auto x) {
    cpu::with_dtype(p.has_weight ? p.w_dtype : p.x_dtype, [&](auto w) {
      block_kernel<decltype(x)::value, decltype(w)::value>(bp, a, block);
    });
  });
}

void reduce_partials_cpu(DType dtype, const double* partials, int64_t blocks, int64_t n, void* out,
                         int64_t begin, int64_t end) {
  cpu::with_dtype(dtype, [&](auto d) {
    reduce_kernel<decltype(d)::value>(partials, blocks, n, out, begin, end);
  });
}

void widen_cpu(DType dtype, const void* src, int64_t n, double* dst) {
  cpu::with_dtype(dtype, [&](auto d) {
    using X = HostElem<decltype(d)::value>;
    const auto* s = static_cast<const typename X::Storage*>(src);
    for (int64_t j = 0; j < n; ++j) dst[j] = X::load(s[j]);
  });
}

}  // namespace oink
