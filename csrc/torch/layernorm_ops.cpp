// oink::layernorm, layernorm_forward and layernorm_backward (CPU and CUDA): validate -> widen the
// weight and bias once (float64 for the CPU kernels of cpu/layernorm_cpu.*; on CUDA float32
// unless both are x's dtype, and float32 for the backward) -> run. Fake kernels in
// python/oink/_fake.py, autograd in python/oink/_autograd.py.
#include "torch/layernorm_ops.h"

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/plan.h"
#include "core/problem.h"
#include "cpu/layernorm_cpu.h"
#include "cpu/norm_backward_cpu.h"
#include "torch/backward_cuda.h"
#include "torch/checks.h"
#include "torch/run.h"
#include "torch/tensors.h"

namespace oink {
namespace {

// A weight or bias widened to float64 (empty for None).
std::vector<double> widened(const std::optional<Tensor>& t, DType dtype, int64_t n) {
  std::vector<double> out;
  if (t) {
    out.resize(static_cast<size_t>(n));
    widen_cpu(dtype, t->data_ptr(), n, out.data());
  }
  return out;
}

const double* data_or_null(const std::vector<double>& v) { return v.empty() ? nullptr : v.data(); }

// A weight or bias as the CUDA kernels read it: float32, contiguous (a new allocation unless it
// already was float32: exact for every narrower dtype).
std::optional<Tensor> as_float32(const std::optional<Tensor>& t) {
  if (!t) return std::nullopt;
  return torch::stable::to(*t, torch::headeronly::ScalarType::Float);
}

// The problem the CUDA kernels see, with the weight and bias `w` and `b` as they read them, both
// of `dtype`.
void set_cuda_params(NormProblem& p, DType dtype, const std::optional<Tensor>& w,
                     const std::optional<Tensor>& b) {
  p.w_dtype = dtype;
  if (w) p.w_align = pointer_alignment(w->data_ptr());
  p.has_bias = b.has_value();
  if (b) p.bias_align = pointer_alignment(b->data_ptr());
}

// The forward's weight and bias as the CUDA kernels read them: as given where each is absent or
// of x's dtype and 16-byte aligned (a model's bfloat16 parameters: no copy, no extra launch),
// else both widened to float32 (new tensors, aligned: an unaligned parameter would refuse long
// rows and take the others element-wise): one parameter type a kernel (core/kernel_table.h,
// KernelWeight::kFloat32OrX). Sets the problem's parameter fields to match.
struct CudaParams {
  std::optional<Tensor> weight, bias;
};
CudaParams cuda_params(NormProblem& p, const Tensor& x, const std::optional<Tensor>& weight,
                       const std::optional<Tensor>& bias) {
  const auto of_x = [&](const std::optional<Tensor>& t) {
    return !t || (t->scalar_type() == x.scalar_type() && pointer_alignment(t->data_ptr()) >= 16);
  };
  const bool as_given = of_x(weight) && of_x(bias);
  CudaParams c{as_given ? weight : as_float32(weight), as_given ? bias : as_float32(bias)};
  set_cuda_params(p, as_given ? p.x_dtype : DType::kFloat32, c.weight, c.bias);
  return c;
}

// The CUDA path: the row type of kernels/layernorm_row.cuh in the schedule make_plan picks.
void forward_cuda(const char* op, NormProblem p, const Tensor& x, const Tensor& out,
                  const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                  double eps, const Tensor& mean, const Tensor& rstd) {
  const CudaParams c = cuda_params(p, x, weight, bias);
  // An empty batch runs no kernel (run_forward), so no row length is out of its reach.
  const std::string unsupported = p.rows == 0 ? "" : cuda_forward_unsupported(p, device_info_of(x));
  if (!unsupported.empty()) throw ArgError(op, "x", unsupported, shape_of(x));
  NormArgs args;
  args.x = x.data_ptr();
  args.out = out.data_ptr();
  args.weight = c.weight ? c.weight->data_ptr() : nullptr;
  args.bias = c.bias ? c.bias->data_ptr() : nullptr;
  args.eps = static_cast<float>(eps);
  args.mean = p.saves_stats ? mean.data_ptr() : nullptr;
  args.rstd = p.saves_stats ? rstd.data_ptr() : nullptr;
  run_forward(op, p, args, x);
}

std::tuple<Tensor, Tensor, Tensor> forward(const char* op, const Tensor& x,
                                           const std::optional<Tensor>& weight,
                                           const std::optional<Tensor>& bias, double eps,
                                           bool save_stats) {
  require_kernels_for(op, x);
  RowView x_rows;
  NormProblem p = check_norm_inputs(NormOp::kLayerNorm, x, weight, nullptr, eps, &x_rows, op);
  const std::optional<DType> b_dtype = check_bias(op, x, bias, p.cols);
  Tensor out = output_for(x, x_rows);
  check_out(p, op, x, x_rows, out);
  Tensor mean = save_stats ? per_row_for(x, p.x_dtype) : Tensor();
  Tensor rstd = save_stats ? per_row_for(x, p.x_dtype) : Tensor();
  if (x.is_cuda()) {
    p.saves_stats = save_stats;
    forward_cuda(op, p, x, out, weight, bias, eps, mean, rstd);
    return {out, mean, rstd};
  }
  const std::vector<double> w = widened(weight, p.w_dtype, p.cols);
  const std::vector<double> b = widened(bias, b_dtype.value_or(p.x_dtype), p.cols);
  LayerNormArgs args;
  args.x = x.data_ptr();
  args.out = out.data_ptr();
  args.weight = data_or_null(w);
  args.bias = data_or_null(b);
  args.mean = save_stats ? mean.data_ptr() : nullptr;
  args.rstd = save_stats ? rstd.data_ptr() : nullptr;
  args.eps = eps;
  if (p.rows > 0 && p.cols > 0) {
    const int64_t grain = std::max<int64_t>(1, 32768 / p.cols);
    torch::stable::parallel_for(0, p.rows, grain, [&](int64_t begin, int64_t end) {
      layernorm_rows_cpu(p, args, begin, end);
    });
  }
  return {out, mean, rstd};
}

Tensor layernorm(Tensor x, std::optional<Tensor> weight, std::optional<Tensor> bias, double eps) {
  return std::get<0>(forward("layernorm", x, weight, bias, eps, false));
}

// layernorm, also returning the mean and rstd = 1 / sqrt(var + eps) of every row.
std::tuple<Tensor, Tensor, Tensor> layernorm_forward(Tensor x, std::optional<Tensor> weight,
                                                     std::optional<Tensor> bias, double eps) {
  return forward("layernorm_forward", x, weight, bias, eps, true);
}

// (dx, dweight, dbias) for the upstream gradient dy, from layernorm_forward's mean and rstd.
// dweight and dbias (the weight's and bias's dtypes; None where there is none) are summed in a
// fixed order: the same bits on every run and at every thread count.
std::tuple<Tensor, std::optional<Tensor>, std::optional<Tensor>> layernorm_backward(
    Tensor dy, Tensor x, std::optional<Tensor> weight, std::optional<Tensor> bias, Tensor mean,
    Tensor rstd) {
  const char* op = "layernorm_backward";
  require_kernels_for(op, x);
  RowView x_rows;
  NormBackwardProblem bp =
      check_norm_backward_inputs(op, NormOp::kLayerNorm, dy, x, weight, &x_rows);
  const NormProblem& p = bp.rows;
  const std::optional<DType> b_dtype = check_bias(op, x, bias, p.cols);
  check_per_row(op, "mean", x, p.x_dtype, mean);
  check_per_row(op, "rstd", x, p.x_dtype, rstd);
#ifdef OINK_WITH_CUDA
  if (x.is_cuda()) {
    // The kernel reads the weight as float32 (widened once: one kernel for every weight dtype);
    // dweight and dbias take the caller's weight's and bias's dtypes.
    const std::optional<Tensor> w = as_float32(weight);
    // The bias is not read, only its gradient summed.
    set_cuda_params(bp.rows, DType::kFloat32, w, std::nullopt);
    bp.rows.has_bias = bias.has_value();
    return norm_backward_cuda(op, dy, x, w, weight, bias, rstd, &mean, bp, x_rows);
  }
#endif
  Tensor dx = output_for(x, x_rows);
  set_backward_rows(op, bp, x, dy, dx);

  // The CUDA plan's blocks (M, N and the dtype decide them); one of zero partials at M=0.
  const int64_t blocks = weight_grad_blocks_for(p.rows, p.cols, p.x_dtype).blocks;
  const std::vector<double> w = widened(weight, p.w_dtype, p.cols);
  std::vector<double> dw_partials, db_partials;
  std::optional<Tensor> dweight, dbias;
  if (weight) {
    dweight = empty_strided_like(*weight, weight->sizes().data(), weight->strides().data());
    dw_partials.assign(static_cast<size_t>(blocks * p.cols), 0.0);
  }
  if (bias) {
    dbias = empty_strided_like(*bias, bias->sizes().data(), bias->strides().data());
    db_partials.assign(static_cast<size_t>(blocks * p.cols), 0.0);
  }
  LayerNormBackwardArgs args;
  args.dy = dy.data_ptr();
  args.x = x.data_ptr();
  args.weight = data_or_null(w);
  args.mean = mean.data_ptr();
  args.rstd = rstd.data_ptr();
  args.dx = dx.data_ptr();
  args.dweight_partials = weight ? dw_partials.data() : nullptr;
  args.dbias_partials = bias ? db_partials.data() : nullptr;
  if (p.rows > 0 && p.cols > 0) {
    torch::stable::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) layernorm_backward_block_cpu(bp, args, k);
    });
  }
  // With no rows the partials stay zero: dweight and dbias are zeros.
  const std::pair<std::optional<Tensor>*, std::pair<const std::vector<double>*, DType>> sums[] = {
      {&dweight, {&dw_partials, p.w_dtype}}, {&dbias, {&db_partials, b_dtype.value_or(p.x_dtype)}}};
  for (const auto& [grad, source] : sums) {
    if (!*grad || p.cols == 0) continue;
    const auto& [partials, dtype] = source;
    torch::stable::parallel_for(0, p.cols, 4096, [&](int64_t begin, int64_t end) {
      reduce_partials_cpu(dtype, partials->data(), blocks, p.cols, (*grad)->data_ptr(), begin, end);
    });
  }
  return {dx, dweight, dbias};
}

}  // namespace

NormProblem layernorm_problem_for_explain(const Tensor& x, const std::optional<Tensor>& weight,
                                          const std::optional<Tensor>& bias, double eps) {
  const char* op = "explain";
  RowView x_rows;
  NormProblem p = check_norm_inputs(NormOp::kLayerNorm, x, weight, nullptr, eps, &x_rows, op);
  check_bias(op, x, bias, p.cols);
  // The output the op would allocate, as rmsnorm's explain takes it: x's strides at the
  // allocator's alignment (the problem's default), or dense, which is only known by making it.
  if (!x_rows.one_row_stride()) check_out(p, op, x, x_rows, output_for(x, x_rows));
  if (x.is_cuda()) {
    cuda_params(p, x, weight, bias);  // as a call would (new copies where it widens)
    const std::string unsupported = cuda_forward_unsupported(p, device_info_of(x));
    if (!unsupported.empty()) throw ArgError(op, "x", unsupported, shape_of(x));
  }
  return p;
}

STABLE_TORCH_LIBRARY_IMPL(oink, CPU, m) {
  m.impl("layernorm", TORCH_BOX(&layernorm));
  m.impl("layernorm_forward", TORCH_BOX(&layernorm_forward));
  m.impl("layernorm_backward", TORCH_BOX(&layernorm_backward));
}

// Registered for CUDA in every build: one without CUDA kernels says so (require_kernels_for).
STABLE_TORCH_LIBRARY_IMPL(oink, CUDA, m) {
  m.impl("layernorm", TORCH_BOX(&layernorm));
  m.impl("layernorm_forward", TORCH_BOX(&layernorm_forward));
  m.impl("layernorm_backward", TORCH_BOX(&layernorm_backward));
}

}  // namespace oink
