// What the reduce-then-map ops (softmax, cross-entropy; core/row_reduce.h) share in the binding:
// the row checks that fill a ReduceProblem, and running a problem on its tensors' device (the
// CPU's rows over threads, or the plan's kernel on the current CUDA stream).
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <string>

#include "core/reduce_plan.h"
#include "core/row_reduce.h"
#include "core/rows.h"

namespace oink {

using torch::stable::Tensor;

// `in` (x, dy or the logits): a float tensor (float64 on the CPU only) of at most 2^31 - 1 rows
// whose last dimension is contiguous; the problem's dtype, sizes, row dimensions and in_strides.
// Its own row view in `rows`.
ReduceProblem check_reduce_input(ReduceOp op, const char* arg, const Tensor& in, RowView* rows);

// Walks `in` and `other` (same shape) together: the problem's row dimensions, in's strides and
// other's into `other_strides`.
void set_reduce_joint_rows(ReduceProblem& p, const char* arg, const Tensor& in, const Tensor& other,
                           RowStrides& other_strides);

// The plan of a call on `in`'s device.
ReducePlan plan_reduce(const ReduceProblem& problem, const Tensor& in);

// Runs the problem on `in`'s device. A failed launch raises, naming the op and the plan.
void run_reduce(const ReduceProblem& problem, const ReduceArgs& args, const Tensor& in);

}  // namespace oink
