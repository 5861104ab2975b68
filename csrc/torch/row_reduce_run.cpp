// The reduce-then-map ops' checks and runs (torch/row_reduce_run.h).
#include "torch/row_reduce_run.h"

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/linear_ce_plan.h"
#include "cpu/row_reduce_cpu.h"
#include "torch/checks.h"
#include "torch/run.h"

#ifdef OINK_WITH_CUDA
#include <torch/csrc/stable/accelerator.h>

#include "kernels/launch.h"
#include "kernels/launch_reduce.h"
#endif

namespace oink {

ReduceProblem check_reduce_input(ReduceOp op, const char* arg, const Tensor& in, RowView* rows) {
  const char* name = traits_of(op).name;
  require_kernels_for(name, in);
  if (!in.defined()) throw ArgError(name, arg, "must be a tensor", "None (an undefined tensor)");
  const std::optional<DType> dtype = to_dtype(in.scalar_type());
  if (!dtype) throw ArgError(name, arg, kFloatDtypes, dtype_of(in));
  check_float64_on_cpu(name, arg, *dtype, in);
  const RowView view = check_rows(name, arg, in);
  if (view.rows > 0x7fffffff) {
    throw ArgError(name, arg, "must have at most 2^31 - 1 rows (one CUDA grid)",
                   std::to_string(view.rows) + " rows");
  }
  ReduceProblem p;
  p.op = op;
  p.dtype = *dtype;
  p.rows = view.rows;
  p.cols = view.cols;
  p.row_dims = view.dims;
  p.in_strides = p.out_strides = view.strides;
  p.in_align = pointer_alignment(in.data_ptr());
  if (rows != nullptr) *rows = view;
  return p;
}

void set_reduce_joint_rows(ReduceProblem& p, const char* arg, const Tensor& in, const Tensor& other,
                           RowStrides& other_strides) {
  const auto sizes = in.sizes();
  const auto in_strides = in.strides();
  const auto o_strides = other.strides();
  const int64_t* strides[2] = {in_strides.data(), o_strides.data()};
  RowStrides joint[2];
  std::string why;
  const auto dims = joint_rows(sizes.data(), static_cast<int>(in.dim()), strides, 2, joint, &why);
  if (!dims) {
    throw ArgError(traits_of(p.op).name, arg,
                   "must be walkable together with the input (" + why + ")",
                   "strides " + strides_of(other) + " against " + strides_of(in));
  }
  p.row_dims = *dims;
  p.in_strides = joint[0];
  other_strides = joint[1];
}

ReducePlan plan_reduce(const ReduceProblem& problem, const Tensor& in) {
  const ReducePlan plan = make_reduce_plan(problem, device_info_of(in));
  const std::string violation = reduce_plan_violation(plan, problem);
  if (!violation.empty()) {
    throw std::logic_error(std::string("oink.") + traits_of(problem.op).name +
                           ": planner bug: " + violation + " (" + describe(plan, problem) + ")");
  }
  return plan;
}

void run_reduce(const ReduceProblem& problem, const ReduceArgs& args, const Tensor& in) {
  const char* name = traits_of(problem.op).name;
  if (problem.rows == 0) return;
  if (in.is_cpu()) {
    const bool softmax =
        problem.op == ReduceOp::kSoftmax || problem.op == ReduceOp::kSoftmaxBackward;
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(problem.cols, 1));
    torch::stable::parallel_for(0, problem.rows, grain, [&](int64_t begin, int64_t end) {
      if (softmax) {
        cpu::softmax_rows(problem, args, begin, end);
      } else {
        cpu::cross_entropy_rows(problem, args, begin, end);
      }
    });
    return;
  }
#ifdef OINK_WITH_CUDA
  const torch::stable::accelerator::DeviceGuard guard(in.get_device_index());
  const ReducePlan plan = plan_reduce(problem, in);
  const cudaError_t err = launch_reduce(plan, problem, args, current_stream_of(in));
  if (err != cudaSuccess) check_launch(name, err, describe(plan, problem));
#else
  (void)name;
  require_kernels_for(name, in);
#endif
}

namespace {

// oink.explain for the reduce-then-map ops: the plan a call of `op` on `x` (the input, dy or the
// logits; for cross_entropy its forward without the fused gradient) would use, as one line.
std::string explain_rows(std::string op, Tensor x) {
  for (const ReduceOpTraits& t : kReduceOps) {
    if (op != t.name) continue;
    RowView rows;
    ReduceProblem p = check_reduce_input(t.op, "x", x, &rows);
    p.out_align = p.in2_align = p.in_align;
    p.in2_strides = p.in_strides;
    p.writes_rows = t.op != ReduceOp::kCrossEntropy;
    return describe(plan_reduce(p, x), p);
  }
  std::string names;
  for (const ReduceOpTraits& t : kReduceOps)
    names += (names.empty() ? "" : ", ") + std::string(t.name);
  throw ArgError("explain_rows", "op", "must be one of " + names, op);
}

// oink.linear_cross_entropy's chunking (core/linear_ce_plan.h): (chunk_rows, chunks, the line).
std::tuple<int64_t, int64_t, std::string> plan_linear_cross_entropy(int64_t rows, int64_t vocab,
                                                                    int64_t hidden,
                                                                    int64_t elem_bytes) {
  const LinearCePlan plan = plan_linear_ce(rows, vocab, hidden, static_cast<int>(elem_bytes));
  return {plan.chunk_rows, plan.chunks, describe(plan)};
}

}  // namespace
}  // namespace oink

STABLE_TORCH_LIBRARY_IMPL(oink, CompositeExplicitAutograd, m) {
  m.impl("explain_rows", TORCH_BOX(&oink::explain_rows));
  m.impl("plan_linear_cross_entropy", TORCH_BOX(&oink::plan_linear_cross_entropy));
}
