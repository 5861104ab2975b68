// rmsnorm_backward and layernorm_backward on CUDA: the plan's row kernel (its gradient policy by
// the problem's op), or the looped pair, then the parameter gradients' ordered reductions
// (kernels/norm_backward.cuh, norm_backward_looped.cuh). No PDL: a training step's kernels are
// long next to their launch.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/kernel_table.h"
#include "kernels/kernel_setup.cuh"
#include "kernels/launch.h"
#include "kernels/launch_kernel.cuh"
#include "kernels/norm_backward.cuh"
#include "kernels/norm_backward_looped.cuh"

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
  params.row_sums = args.row_sums;
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

// Calls f(std::integral_constant<int, i>{}) for each index i.
template <typename F, size_t... kIndices>
void for_each_entry(const F& f, std::index_sequence<kIndices...>) {
  (f(std::integral_constant<int, static_cast<int>(kIndices)>{}), ...);
}

template <template <typename> class GradOf, typename T, typename W>
cudaError_t launch_typed(const BackwardPlan& plan, const NormBackwardProblem& bp,
                         const BackwardArgs& args, cudaStream_t stream) {
  const BackwardParams params = backward_params(plan, bp, args);
  // A cluster of one CTA per slice per block for long rows (grid.x a multiple of the cluster).
  const dim3 grid(static_cast<unsigned>(plan.blocks * std::max(plan.cluster_ctas, 1))),
      block(plan.block_threads);
  // The entry of core/kernel_table.h the plan names (backward_plan_violation checks there is
  // one): a fold over the table, which names every row kernel compiled here.
  const int entry = backward_kernel_entry(plan);
  cudaError_t err = cudaErrorInvalidConfiguration;
  constexpr bool kLayerNorm = std::is_same_v<GradOf<float>, LayerNormGrad<float>>;
  using Acc = device::RowAcc<T>;
  static_assert(sizeof(typename GradOf<Acc>::Combine::Value) ==
                    backward_row_sums_bytes(kLayerNorm, std::is_same_v<T, float>),
                "the looped plan's row_sums_bytes (core/backward_plan.h)");
  const auto launch_entry = [&](auto index) {
    constexpr BackwardKernel k = kBackwardKernels[decltype(index)::value];
    constexpr bool kInstantiated = k.for_layernorm || !kLayerNorm;
    if constexpr (kInstantiated && k.looped) {
      if (entry != decltype(index)::value) return;
      // The rows' sums (a CTA a row), then dx and the partials (a thread a chunk and block).
      err = launch_kernel(norm_backward_row_sums_kernel<GradOf, T, W, k.vector_io>,
                          dim3(static_cast<unsigned>(bp.rows.rows)), dim3(kBackwardMaxThreads), 0,
                          false, stream, params);
      if (err == cudaSuccess) {
        err = launch_kernel(
            norm_backward_columns_kernel<GradOf, T, W, k.vector_io>,
            dim3(static_cast<unsigned>(plan.column_tiles), static_cast<unsigned>(plan.blocks)),
            dim3(kLoopedColumnThreads), 0, false, stream, params);
      }
    } else if constexpr (kInstantiated) {
      if (entry != decltype(index)::value) return;
      constexpr auto kernel = norm_backward_kernel<GradOf, T, W, k.vector_io, k.chunks_per_thread,
                                                   k.prefetch_next_row, k.cluster>;
      err = cudaSuccess;
      if constexpr (k.cluster) {
        err = allow_non_portable_clusters<kernel>();
        if (err == cudaSuccess) err = allow_large_smem<kernel>();  // the staged rows
      }
      BackwardParams copy = params;
      void* kernel_args[] = {&copy};
      if (err == cudaSuccess) {
        err = launch_kernel(reinterpret_cast<const void*>(kernel), grid, block,
                            static_cast<size_t>(plan.smem_bytes), false, stream, kernel_args,
                            plan.cluster_ctas);
      }
    }
  };
  for_each_entry(launch_entry, std::make_index_sequence<kBackwardKernels.size()>{});
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
