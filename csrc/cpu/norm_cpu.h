// CPU kernels: the contract of the CUDA ones (docs/contract.md: inputs widened, one rounding at
// the end, row strides honoured), with the sum of squares and rsqrt in float64 as PyTorch's CPU
// kernels do.
#pragma once

#include <cstdint>

#include "core/args.h"
#include "core/problem.h"

namespace oink {

// Normalises rows [row_begin, row_end). Rows are independent, so callers may split the range
// across threads freely; a row's bits never depend on the split (batch invariance).
void norm_rows_cpu(const NormProblem& problem, const NormArgs& args, int64_t row_begin,
                   int64_t row_end);

}  // namespace oink
