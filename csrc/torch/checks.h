// Validation of the ops' arguments: every rejected input raises oink::ArgError naming the
// argument, what was expected and what was given, before anything is allocated or launched.
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <optional>
#include <string>

#include "core/problem.h"
#include "core/rows.h"

namespace oink {

using torch::stable::Tensor;

// "[4, 4096]": a tensor's shape as messages print it; "(4096, 1)" its strides; "cuda:0" its
// device; "BFloat16" its dtype.
std::string shape_of(const Tensor& t);
std::string strides_of(const Tensor& t);
std::string device_of(const Tensor& t);
std::string dtype_of(const Tensor& t);

// The DType of a tensor of float16, bfloat16, float32 or float64; nullopt for any other dtype.
std::optional<DType> to_dtype(torch::headeronly::ScalarType t);
// What the ops say of a tensor of another dtype.
extern const char* const kFloatDtypes;
// float64 runs on the CPU only (gradcheck): raises for a float64 CUDA tensor.
void check_float64_on_cpu(const char* op, const char* arg, DType dtype, const Tensor& t);

bool same_device(const Tensor& a, const Tensor& b);

// A tensor of rank >= 1 on the CPU or CUDA whose last dimension is contiguous and whose rows do
// not overlap: its row view (core/rows.h).
RowView check_rows(const char* op, const char* arg, const Tensor& t);

// `t` has the dtype, device and shape of `ref` (named `ref_name` in messages).
void check_like(const char* op, const char* arg, const char* ref_name, const Tensor& ref,
                const Tensor& t);

// The DType of a tensor whose dtype the checks accepted (float16, bfloat16, float32, float64).
DType float_dtype_of(const Tensor& t);

// Checks x (and, for the fused op, residual), weight and eps; returns the problem the planner
// sees, and x's own row view in `x_rows` when given. For rmsnorm the output is not known yet:
// add it with check_out().
// `name` names the op in messages (default: op_name(op)).
NormProblem check_norm_inputs(NormOp op, const Tensor& x, const std::optional<Tensor>& weight,
                              const Tensor* residual, double eps, RowView* x_rows = nullptr,
                              const char* name = nullptr);

// layernorm: checks a bias (None, or x's device, a float dtype, 1-D of length N, contiguous) and
// returns its dtype (nullopt for None).
std::optional<DType> check_bias(const char* op, const Tensor& x, const std::optional<Tensor>& bias,
                                int64_t cols);

// A statistic per row (rstd, mean): rmsnorm_forward's or layernorm_forward's, contiguous,
// x.shape[:-1], float32 (float64 for float64 x), on x's device.
void check_per_row(const char* op, const char* arg, const Tensor& x, DType x_dtype,
                   const Tensor& stat);

// rmsnorm: checks `out` (a caller's, for rmsnorm.out, or one just allocated) against x (whose
// row view check_norm_inputs gave) and completes the problem with its strides and alignment.
// `op` names the overload in messages.
void check_out(NormProblem& problem, const char* op, const Tensor& x, const RowView& x_rows,
               const Tensor& out);

// A backward op (`name`) of `op`: checks dy (x's dtype, device and shape), x and weight (as the
// forward op's); returns the problem with x's rows, and x's own row view in `x_rows`. The saved
// statistics are checked by check_per_row(); complete the problem with dx's strides by
// set_backward_rows() once dx exists.
NormBackwardProblem check_norm_backward_inputs(const char* name, NormOp op, const Tensor& dy,
                                               const Tensor& x, const std::optional<Tensor>& weight,
                                               RowView* x_rows);

// x, dy and dx walked together: one set of row dimensions and each tensor's strides.
void set_backward_rows(const char* name, NormBackwardProblem& problem, const Tensor& x,
                       const Tensor& dy, const Tensor& dx);

}  // namespace oink
