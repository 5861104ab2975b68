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
// sees. The output's stride and alignment (rmsnorm) are filled in by the caller once allocated.
NormProblem check_norm_inputs(NormOp op, const Tensor& x, const std::optional<Tensor>& weight,
                              const Tensor* residual, double eps);

}  // namespace oink
