// rmsnorm_backward and layernorm_backward on CUDA: the plan's row kernel (its gradient policy by
// the problem's op), then the parameter gradients' ordered reductions
// (kernels/norm_backward.cuh). No PDL: a training step's kernels are long next to their launch.
#include <cstdint>
#include <type_traits>

#include "kernels/launch.h"
#include "kernels/launch_kernel.cuh"
#include "kernels/norm_backward.cuh"

namespace oink {
namespace {

BackwardParams backward_params(const BackwardPlan& plan, const NormBackwardProblem& bp,
                               const BackwardArgs& args) {
  const NormProblem& p = bp.rows;
  BackwardParams params{};
  params.dy = args.dy;
  params.x = args.x;
  params.weight = args.weight;
  params.rstd = args.rstd;
  params.dx = args.dx;
  params.partials = args.weight != nullptr ? args.partials : nullptr;
  params.rows = p.rows;
  params.cols = p.cols;
  params.chunks_per_row = plan.chunks_per_row;
  params.block_rows = plan.block_rows;
  params.threads_per_row = plan.threads_per_row;
  params.inv_cols = 1.0f / static_cast<float>(p.cols);
  params.inv_cols_d = 1.0 / static_cast<double>(p.cols);
  params.row_index = RowIndexer(p.row_dims);
  params.x_strides = p.x_strides;
  params.dy_strides = bp.dy_strides;
  params.dx_strides = bp.dx_strides;
  params.mean = args.mean;
  params.bias_partials = p.has_bias ? args.bias_partials : nullptr;
  return params;
}

// partials [blocks][N] of Acc -> out[N] of `dtype`, column by column in block order.
template <typename Acc>
cudaError_t launch_partials_reduce(const BackwardPlan& plan, const NormBackwardProblem& bp,
                                   const void* partials, DType dtype, void* out,
                                   cudaStream_t stream) {
  const auto launch = [&](auto* typed_out) {
    using Out = std::remove_pointer_t<decltype(typed_out)>;
    return launch_kernel(weight_grad_reduce_kernel<Acc, Out>,
                         dim3(static_cast<unsigned>(plan.reduce_grid)), dim3(plan.reduce_threads),
                         0, false, stream, static_cast<const Acc*>(partials), plan.blocks,
                         bp.rows.cols, typed_out);
  };
  switch (dtype) {
    case DType::kFloat32:
      return launch(static_cast<float*>(out));
    case DType::kFloat16:
      return launch(static_cast<__half*>(out));
    case DType::kBFloat16:
      return launch(static_cast<__nv_bfloat16*>(out));
    case DType::kFloat64:  // CPU only (backward_unsupported)
      break;
  }
  return cudaErrorInvalidValue;
}

template <template <typename> class GradOf, typename T, typename W>
cudaError_t launch_typed(const BackwardPlan& plan, const NormBackwardProblem& bp,
                         const BackwardArgs& args, cudaStream_t stream) {
  const BackwardParams params = backward_params(plan, bp, args);
  const dim3 grid(static_cast<unsigned>(plan.blocks)), block(plan.block_threads);
  // The instantiations a plan can name (backward_plan_violation): vector I/O prefetches at 1 or
  // 2 chunks a thread and not at 4; element-wise, 1 or 2.
  const auto launch = [&](auto kernel) {
    return launch_kernel(kernel, grid, block, 0, false, stream, params);
  };
  const int chunks = plan.chunks_per_thread;
  cudaError_t err = cudaErrorInvalidConfiguration;
  if (plan.prefetch_next_row) {
    err = chunks == 1 ? launch(norm_backward_kernel<GradOf, T, W, true, 1, true>)
                      : launch(norm_backward_kernel<GradOf, T, W, true, 2, true>);
  } else if (plan.vector_io) {  // 4 chunks, reloaded from L1 at each use
    err = launch(norm_backward_kernel<GradOf, T, W, true, 4, false>);
  } else {
    err = chunks == 1 ? launch(norm_backward_kernel<GradOf, T, W, false, 1, false>)
                      : launch(norm_backward_kernel<GradOf, T, W, false, 2, false>);
  }
  using Acc = device::RowAcc<T>;
  if (err == cudaSuccess && args.weight != nullptr) {
    err = launch_partials_reduce<Acc>(plan, bp, args.partials, args.dweight_dtype, args.dweight,
                                      stream);
  }
  if (err == cudaSuccess && bp.rows.has_bias) {
    err = launch_partials_reduce<Acc>(plan, bp, args.bias_partials, args.dbias_dtype, args.dbias,
                                      stream);
  }
  return err;
}

template <typename T>
cudaError_t launch_weight(const BackwardPlan& plan, const NormBackwardProblem& bp,
                          const BackwardArgs& args, cudaStream_t stream) {
  const NormProblem& p = bp.rows;
  if (p.op == NormOp::kLayerNorm) {
    // The binding widens LayerNorm's weight to float32: one weight type
    // (backward_plan_violation).
    return launch_typed<LayerNormGrad, T, float>(plan, bp, args, stream);
  }
  // No weight: any W works (the pointer is null); reuse x's.
  switch (p.has_weight ? p.w_dtype : p.x_dtype) {
    case DType::kFloat32:
      return launch_typed<RmsNormGrad, T, float>(plan, bp, args, stream);
    case DType::kFloat16:
      return launch_typed<RmsNormGrad, T, __half>(plan, bp, args, stream);
    case DType::kBFloat16:
      return launch_typed<RmsNormGrad, T, __nv_bfloat16>(plan, bp, args, stream);
    case DType::kFloat64:  // CPU only (backward_unsupported)
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_norm_backward(const BackwardPlan& plan, const NormBackwardProblem& bp,
                                 const BackwardArgs& args, cudaStream_t stream) {
  if (bp.rows.cols == 0) return cudaSuccess;  // nothing to write (M = 0 still zeroes dweight)
  switch (bp.rows.x_dtype) {
    case DType::kFloat32:
      return launch_weight<float>(plan, bp, args, stream);
    case DType::kFloat16:
      return launch_weight<__half>(plan, bp, args, stream);
    case DType::kBFloat16:
      return launch_weight<__nv_bfloat16>(plan, bp, args, stream);
    case DType::kFloat64:  // CPU only (backward_unsupported)
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace oink
