// CPU kernels: the same contract as the CUDA ones (float32 math, one rounding, row strides
// honoured). Also the reference the C++ tests hold the planner's promises against.
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
