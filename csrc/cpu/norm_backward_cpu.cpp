#include "cpu/norm_backward_cpu.h"

#include <algorithm>

#include "cpu/host_elem.h"

namespace oink {
namespace {

using cpu::HostElem;

constexpr int64_t kMinWeightGradBlockRows = 32;
constexpr int64_t kMaxWeightGradBlocks = 256;

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
  const int64_t block_rows = weight_grad_block_rows(p.rows);
  const int64_t begin = block * block_rows, end = std::min(p.rows, begin + block_rows);
  const auto* weight = static_cast<const typename W::Storage*>(a.weight);
  double* partial = a.dweight_partials != nullptr ? a.dweight_partials + block * n : nullptr;
  if (partial != nullptr) std::fill(partial, partial + n, 0.0);
  const RowIndexer rows(p.row_dims);
  for (int64_t row = begin; row < end; ++row) {
    const RowIndex at = split_row(rows, row);
    const XS* x = static_cast<const XS*>(a.x) + row_offset(rows, at, p.x_strides);
    const XS* dy = static_cast<const XS*>(a.dy) + row_offset(rows, at, bp.dy_strides);
    XS* dx = static_cast<XS*>(a.dx) + row_offset(rows, at, bp.dx_strides);
    const double r = XD == DType::kFloat64 ? static_cast<const double*>(a.rstd)[row]
                                           : static_cast<const float*>(a.rstd)[row];
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
  }
}

template <DType XD>
OINK_INLINE void dispatch_weight(const NormBackwardProblem& bp, const NormBackwardArgs& a,
                                 int64_t block) {
  const NormProblem& p = bp.rows;
  switch (p.has_weight ? p.w_dtype : XD) {  // without a weight the weight type is irrelevant
    case DType::kFloat32:
      return block_kernel<XD, DType::kFloat32>(bp, a, block);
    case DType::kBFloat16:
      return block_kernel<XD, DType::kBFloat16>(bp, a, block);
    case DType::kFloat16:
      return block_kernel<XD, DType::kFloat16>(bp, a, block);
    case DType::kFloat64:
      return block_kernel<XD, DType::kFloat64>(bp, a, block);
  }
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

int64_t weight_grad_block_rows(int64_t rows) {
  return std::max(kMinWeightGradBlockRows,
                  (rows + kMaxWeightGradBlocks - 1) / kMaxWeightGradBlocks);
}

OINK_CPU_CLONES void norm_backward_block_cpu(const NormBackwardProblem& bp,
                                             const NormBackwardArgs& a, int64_t block) {
  switch (bp.rows.x_dtype) {
    case DType::kFloat32:
      return dispatch_weight<DType::kFloat32>(bp, a, block);
    case DType::kBFloat16:
      return dispatch_weight<DType::kBFloat16>(bp, a, block);
    case DType::kFloat16:
      return dispatch_weight<DType::kFloat16>(bp, a, block);
    case DType::kFloat64:
      return dispatch_weight<DType::kFloat64>(bp, a, block);
  }
}

void reduce_weight_grad_cpu(const NormBackwardProblem& bp, const double* partials, int64_t blocks,
                            void* dweight, int64_t begin, int64_t end) {
  const int64_t n = bp.rows.cols;
  switch (bp.rows.w_dtype) {
    case DType::kFloat32:
      return reduce_kernel<DType::kFloat32>(partials, blocks, n, dweight, begin, end);
    case DType::kBFloat16:
      return reduce_kernel<DType::kBFloat16>(partials, blocks, n, dweight, begin, end);
    case DType::kFloat16:
      return reduce_kernel<DType::kFloat16>(partials, blocks, n, dweight, begin, end);
    case DType::kFloat64:
      return reduce_kernel<DType::kFloat64>(partials, blocks, n, dweight, begin, end);
  }
}

}  // namespace oink
