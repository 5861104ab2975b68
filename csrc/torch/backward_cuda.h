// The CUDA path of the backward ops (rmsnorm_backward, layernorm_backward): the plan of
// core/backward_plan.h, the row kernel and the parameter gradients' ordered reductions of
// kernels/norm_backward.cuh, with scratch partials from torch's allocator on the current stream.
#pragma once

#ifdef OINK_WITH_CUDA
#include <torch/csrc/stable/tensor.h>

#include <optional>
#include <tuple>

#include "core/problem.h"
#include "core/rows.h"

namespace oink {

using torch::stable::Tensor;

// (dx, dweight, dbias). (A tuple, not a struct: a struct of torch::stable::Tensor members would
// have greater visibility than their type, which g++ warns about.)
using BackwardGrads = std::tuple<Tensor, std::optional<Tensor>, std::optional<Tensor>>;

// `weight`: the parameter as the kernel reads it (layernorm: widened to float32), `weight_like`:
// the caller's, whose dtype and layout dweight takes; `bias` (layernorm): the caller's, likewise
// for dbias. `mean`: layernorm_forward's (nullptr for rmsnorm). `problem` holds x's rows as the
// checks made them (with the kernel weight's dtype and alignment); its strides for dy and dx are
// set here. Raises ArgError naming x for rows the kernels do not take.
BackwardGrads norm_backward_cuda(const char* op, Tensor dy, Tensor x, std::optional<Tensor> weight,
                                 const std::optional<Tensor>& weight_like,
                                 const std::optional<Tensor>& bias, const Tensor& rstd,
                                 const Tensor* mean, NormBackwardProblem problem,
                                 const RowView& x_rows);

}  // namespace oink
#endif
