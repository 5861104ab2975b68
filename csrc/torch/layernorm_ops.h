// What oink::explain needs of the layernorm op (torch/layernorm_ops.cpp).
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <optional>

#include "core/problem.h"

namespace oink {

// The problem a layernorm call with these arguments plans with: checked as the op checks them,
// and on CUDA with the weight and bias as the float32 copies its kernels read.
NormProblem layernorm_problem_for_explain(const torch::stable::Tensor& x,
                                          const std::optional<torch::stable::Tensor>& weight,
                                          const std::optional<torch::stable::Tensor>& bias,
                                          double eps);

}  // namespace oink
