// Validation of the ops' arguments: every rejected input raises oink::ArgError naming the
// argument, what was expected and what was given, before anything is allocated or launched.
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <optional>

#include "core/problem.h"
#include "core/rows.h"

namespace oink {

using torch::stable::Tensor;

// Checks x (and, for the fused op, residual), weight and eps; returns the problem the planner
// sees, and x's own row view in `x_rows` when given. For rmsnorm the output is not known yet:
// add it with check_out().
NormProblem check_norm_inputs(NormOp op, const Tensor& x, const std::optional<Tensor>& weight,
                              const Tensor* residual, double eps, RowView* x_rows = nullptr);

// rmsnorm: checks `out` (a caller's, for rmsnorm.out, or one just allocated) against x (whose
// row view check_norm_inputs gave) and completes the problem with its strides and alignment.
// `op` names the overload in messages.
void check_out(NormProblem& problem, const char* op, const Tensor& x, const RowView& x_rows,
               const Tensor& out);

}  // namespace oink
