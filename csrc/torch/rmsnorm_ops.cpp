// oink::rmsnorm (and .out), oink::fused_add_rms_norm and oink::explain (of these and layernorm)
// for CPU and CUDA tensors: validate -> NormProblem -> make_plan -> launch. Fake (meta) kernels
// live in python/oink/_fake.py because they must work on symbolic shapes, which C++ kernels
// cannot read.
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda_targets.h"
#include "core/error.h"
#include "core/plan.h"
#include "cpu/norm_backward_cpu.h"
#include "cpu/norm_cpu.h"
#include "torch/backward_cuda.h"
#include "torch/checks.h"
#include "torch/layernorm_ops.h"
#include "torch/run.h"
#include "torch/tensors.h"

#ifdef OINK_WITH_CUDA
#include <torch/csrc/stable/accelerator.h>

#include "kernels/launch.h"
#endif

namespace oink {
namespace {

NormArgs args_of(const Tensor& x, void* out, const std::optional<Tensor>& weight, double eps) {
  NormArgs args;
  args.x = x.data_ptr();
  args.out = out;
  args.weight = weight ? weight->data_ptr() : nullptr;
  args.eps = static_cast<float>(eps);
  return args;
}

Tensor rmsnorm(Tensor x, std::optional<Tensor> weight, double eps) {
  require_kernels_for("rmsnorm", x);
  RowView x_rows;
  NormProblem problem = check_norm_inputs(NormOp::kRmsNorm, x, weight, nullptr, eps, &x_rows);
  Tensor out = output_for(x, x_rows);
  check_out(problem, "rmsnorm", x, x_rows, out);
  run_forward("rmsnorm", problem, args_of(x, out.data_ptr(), weight, eps), x);
  return out;
}

Tensor rmsnorm_out(Tensor x, std::optional<Tensor> weight, double eps, Tensor out) {
  require_kernels_for("rmsnorm.out", x);
  RowView x_rows;
  NormProblem problem =
      check_norm_inputs(NormOp::kRmsNorm, x, weight, nullptr, eps, &x_rows, "rmsnorm.out");
  check_out(problem, "rmsnorm.out", x, x_rows, out);
  run_forward("rmsnorm.out", problem, args_of(x, out.data_ptr(), weight, eps), x);
  return out;
}

void fused_add_rms_norm(Tensor x, Tensor residual, std::optional<Tensor> weight, double eps) {
  require_kernels_for("fused_add_rms_norm", x);
  const NormProblem problem =
      check_norm_inputs(NormOp::kFusedAddRmsNorm, x, weight, &residual, eps);
  NormArgs args = args_of(x, x.data_ptr(), weight, eps);
  args.residual = residual.data_ptr();
  run_forward("fused_add_rms_norm", problem, args, x);
}

// rmsnorm, also returning 1/rms per row (the backward pass's saved statistic): the same plan and
// the same bits in out as rmsnorm's.
std::tuple<Tensor, Tensor> rmsnorm_forward(Tensor x, std::optional<Tensor> weight, double eps) {
  require_kernels_for("rmsnorm_forward", x);
  RowView x_rows;
  NormProblem problem =
      check_norm_inputs(NormOp::kRmsNorm, x, weight, nullptr, eps, &x_rows, "rmsnorm_forward");
  problem.saves_stats = true;
  Tensor out = output_for(x, x_rows);
  check_out(problem, "rmsnorm_forward", x, x_rows, out);
  Tensor rstd = per_row_for(x, problem.x_dtype);
  NormArgs args = args_of(x, out.data_ptr(), weight, eps);
  args.rstd = rstd.data_ptr();
  run_forward("rmsnorm_forward", problem, args, x);
  return {out, rstd};
}

using BackwardResult = std::tuple<Tensor, std::optional<Tensor>>;

// (dx, dweight) of y = rmsnorm(x, weight) for the upstream gradient dy, from rmsnorm_forward's
// rstd. dweight (the weight's dtype, None without a weight) is summed in a fixed order
// (core/backward_plan.h): the same bits on every run and at every thread count.
BackwardResult rmsnorm_backward(Tensor dy, Tensor x, std::optional<Tensor> weight, Tensor rstd) {
  const char* op = "rmsnorm_backward";
  require_kernels_for(op, x);
  RowView x_rows;
  NormBackwardProblem bp = check_norm_backward_inputs(op, NormOp::kRmsNorm, dy, x, weight, &x_rows);
  const NormProblem& p = bp.rows;
  check_per_row(op, "rstd", x, p.x_dtype, rstd);
#ifdef OINK_WITH_CUDA
  if (x.is_cuda()) {
    auto [dx, dweight, dbias] =
        norm_backward_cuda(op, dy, x, weight, weight, std::nullopt, rstd, nullptr, bp, x_rows);
    return {dx, dweight};
  }
#endif
  Tensor dx = output_for(x, x_rows);
  set_backward_rows(op, bp, x, dy, dx);

  std::optional<Tensor> dweight;
  std::vector<double> partials;
  // The CUDA plan's blocks (M, N and the dtype decide them); one of zero partials at M=0.
  const int64_t blocks = weight_grad_blocks_for(p.rows, p.cols, p.x_dtype).blocks;
  if (weight) {
    dweight = empty_strided_like(*weight, weight->sizes().data(), weight->strides().data());
    partials.assign(static_cast<size_t>(blocks * p.cols), 0.0);
  }
  NormBackwardArgs args;
  args.dy = dy.data_ptr();
  args.x = x.data_ptr();
  args.weight = weight ? weight->data_ptr() : nullptr;
  args.rstd = rstd.data_ptr();
  args.dx = dx.data_ptr();
  args.dweight_partials = weight ? partials.data() : nullptr;
  if (p.rows > 0 && p.cols > 0) {
    torch::stable::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) norm_backward_block_cpu(bp, args, b);
    });
  }
  if (dweight && p.cols > 0) {
    torch::stable::parallel_for(0, p.cols, 4096, [&](int64_t begin, int64_t end) {
      reduce_partials_cpu(p.w_dtype, partials.data(), blocks, p.cols, dweight->data_ptr(), begin,
                          end);
    });
  }
  return {dx, dweight};
}

// The plan as plan_facts() names it: (names of the text, number and list fields in that order,
// the texts, the numbers, then the lists).
using ExplainResult = std::tuple<std::vector<std::string>, std::vector<std::string>,
                                 std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>>;

ExplainResult explain(std::string op, Tensor x, std::optional<Tensor> weight,
                      std::optional<Tensor> residual, double eps, std::optional<Tensor> bias) {
  NormProblem problem;
  if (op == "rmsnorm") {
    RowView x_rows;
    problem = check_norm_inputs(NormOp::kRmsNorm, x, weight, nullptr, eps, &x_rows);
    // The output rmsnorm would allocate: x's strides or dense, at the allocator's alignment.
    if (!x_rows.one_row_stride()) {
      const Tensor out = output_for(x, x_rows);
      check_out(problem, "rmsnorm", x, x_rows, out);
    }
  } else if (op == "fused_add_rms_norm") {
    if (!residual) throw ArgError("explain", "residual", "is required for " + op, "None");
    problem = check_norm_inputs(NormOp::kFusedAddRmsNorm, x, weight, &*residual, eps);
  } else if (op == "layernorm") {
    problem = layernorm_problem_for_explain(x, weight, bias, eps);
  } else {
    throw ArgError("explain", "op", "must be 'rmsnorm', 'fused_add_rms_norm' or 'layernorm'",
                   "'" + op + "'");
  }
  if (bias && problem.op != NormOp::kLayerNorm) {
    throw ArgError("explain", "bias", "is layernorm's only", "a tensor for " + op);
  }
#ifdef OINK_WITH_CUDA
  std::optional<torch::stable::accelerator::DeviceGuard> guard;
  if (x.is_cuda()) guard.emplace(x.get_device_index());
#endif
  const PlanFacts facts = plan_facts(plan_call(op.c_str(), problem, x), problem, device_info_of(x));
  std::vector<std::string> names;
  for (const char* name : kPlanTextFields) names.emplace_back(name);
  for (const char* name : kPlanNumberFields) names.emplace_back(name);
  for (const char* name : kPlanListFields) names.emplace_back(name);
  static_assert(kPlanListFields.size() == 2, "explain's schema returns two lists");
  return {names, std::vector<std::string>(facts.text.begin(), facts.text.end()),
          std::vector<int64_t>(facts.numbers.begin(), facts.numbers.end()), facts.lists[0],
          facts.lists[1]};
}

// The nvcc targets this build embeds ("" without CUDA kernels): python/oink decides from it, and
// the device's capability, whether a GPU is served, without creating a CUDA context.
std::string cuda_targets() {
#ifdef OINK_WITH_CUDA
  return OINK_CUDA_TARGETS;
#else
  return "";
#endif
}

bool serves_capability(int64_t major, int64_t minor) {
  return targets_serve(parse_cuda_targets(cuda_targets()), static_cast<int>(major),
                       static_cast<int>(minor));
}

bool set_pdl(bool enabled) { return exchange_allow_pdl(enabled); }

}  // namespace

// No tensor arguments: one kernel for every dispatch key.
STABLE_TORCH_LIBRARY_IMPL(oink, CompositeExplicitAutograd, m) {
  m.impl("set_pdl", TORCH_BOX(&set_pdl));
  m.impl("cuda_targets", TORCH_BOX(&cuda_targets));
  m.impl("serves_capability", TORCH_BOX(&serves_capability));
}

STABLE_TORCH_LIBRARY_IMPL(oink, CPU, m) {
  m.impl("rmsnorm", TORCH_BOX(&rmsnorm));
  m.impl("rmsnorm_forward", TORCH_BOX(&rmsnorm_forward));
  m.impl("rmsnorm_backward", TORCH_BOX(&rmsnorm_backward));
  m.impl("rmsnorm.out", TORCH_BOX(&rmsnorm_out));
  m.impl("fused_add_rms_norm", TORCH_BOX(&fused_add_rms_norm));
  m.impl("rms_norm", TORCH_BOX(&rmsnorm));
  m.impl("fused_add_rms_norm_", TORCH_BOX(&fused_add_rms_norm));
  m.impl("explain", TORCH_BOX(&explain));
}

// Registered in every build: one without CUDA kernels then says so (require_kernels_for) instead
// of the dispatcher's "could not run with arguments from the 'CUDA' backend".
STABLE_TORCH_LIBRARY_IMPL(oink, CUDA, m) {
  m.impl("rmsnorm", TORCH_BOX(&rmsnorm));
  m.impl("rmsnorm_forward", TORCH_BOX(&rmsnorm_forward));
  m.impl("rmsnorm_backward", TORCH_BOX(&rmsnorm_backward));
  m.impl("rmsnorm.out", TORCH_BOX(&rmsnorm_out));
  m.impl("fused_add_rms_norm", TORCH_BOX(&fused_add_rms_norm));
  m.impl("rms_norm", TORCH_BOX(&rmsnorm));
  m.impl("fused_add_rms_norm_", TORCH_BOX(&fused_add_rms_norm));
  m.impl("explain", TORCH_BOX(&explain));
}

}  // namespace oink
