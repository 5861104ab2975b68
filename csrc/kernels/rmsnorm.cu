// RMSNorm forward and fused add + RMSNorm forward (vLLM semantics): launches the plan's
// schedule, with programmatic dependent launch when the plan says so. The schedules share one
// row computation (kernels/norm_row.cuh) and are chosen by make_plan() (core/plan.cpp):
//
//   norm_kernel<.., kChunks > 0>  row_in_registers (kernels/norm_row_group.cuh): decode and
//                                 mid-size batches, lowest latency.
//   norm_kernel<.., 0>            two_pass (same file): rows too long for registers.
//   norm_streamed_kernel          streamed (kernels/norm_streamed.cuh): persistent CTAs keep rows
//                                 in flight through cp.async; large rmsnorm batches.
//
// Row ownership is the same in all three (see core/plan.h): chunk c of a row belongs to thread
// c % threads_per_row, which sums its chunks in increasing order before device::row_sum()
// combines the threads in a fixed tree. A row's bits depend on (N, dtype) and its values only.
#include <atomic>
#include <cstdint>

#include "kernels/launch.h"
#include "kernels/launch_kernel.cuh"
#include "kernels/norm_row.cuh"
#include "kernels/norm_row_group.cuh"
#include "kernels/norm_streamed.cuh"

namespace oink {
namespace {

template <typename Kernel>
cudaError_t launch(Kernel kernel, const NormPlan& plan, const KernelParams& params,
                   cudaStream_t stream) {
  return launch_kernel(kernel, dim3(static_cast<unsigned>(plan.grid)),
                       dim3(static_cast<unsigned>(plan.block_threads)),
                       static_cast<size_t>(plan.smem_bytes), plan.use_pdl, stream, params);
}

// Shared memory above 48 KiB, static and dynamic together, must be opted into, per kernel and
// device. Done once per instantiation and device, to the device's limit, whatever this plan needs,
// so that every later plan fits. (On the H200 a plan of exactly 48 KiB of dynamic shared memory
// plus the kernel's 512 static bytes failed to launch before the first opt-in; 2026-11-30.) The
// flag lives in a function templated on the kernel's parameters: every instantiation has the same
// pointer type, so a static keyed on that type would be shared by all of them.
template <typename T, typename W, int kChunks>
cudaError_t allow_large_smem_streamed() {
  static std::atomic<uint64_t> devices_done{0};
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const uint64_t bit = uint64_t{1} << (device & 63);
  if (devices_done.load(std::memory_order_acquire) & bit) return cudaSuccess;
  int limit = 0;
  err = cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err != cudaSuccess) return err;
  const auto kernel = norm_streamed_kernel<T, W, kChunks>;
  cudaFuncAttributes attributes{};
  err = cudaFuncGetAttributes(&attributes, kernel);
  if (err != cudaSuccess) return err;
  // The opt-in limit covers static and dynamic shared memory together.
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             limit - static_cast<int>(attributes.sharedSizeBytes));
  if (err == cudaSuccess) devices_done.fetch_or(bit, std::memory_order_release);
  return err;
}

template <typename T, typename W, int kChunks>
cudaError_t launch_streamed(const NormPlan& plan, const KernelParams& params, cudaStream_t s) {
  const cudaError_t err = allow_large_smem_streamed<T, W, kChunks>();
  return err != cudaSuccess ? err : launch(norm_streamed_kernel<T, W, kChunks>, plan, params, s);
}

template <typename T, typename W, bool kFused, bool kVector>
cudaError_t dispatch_variant(const NormPlan& plan, const KernelParams& params, cudaStream_t s) {
  switch (plan.variant) {
    case KernelVariant::kStreamed:
      if constexpr (kVector && !kFused) {  // never planned otherwise (plan_violation)
        switch (plan.chunks_per_thread) {
          case 1:
            return launch_streamed<T, W, 1>(plan, params, s);
          case 2:
            return launch_streamed<T, W, 2>(plan, params, s);
          case 3:
          case 4:
            return launch_streamed<T, W, 4>(plan, params, s);
        }
      }
      break;
    case KernelVariant::kTwoPass:
      return launch(norm_kernel<T, W, kFused, kVector, 0>, plan, params, s);
    case KernelVariant::kRowInRegisters:
      switch (plan.chunks_per_thread) {
        case 1:
          return launch(norm_kernel<T, W, kFused, kVector, 1>, plan, params, s);
        case 2:
          return launch(norm_kernel<T, W, kFused, kVector, 2>, plan, params, s);
        case 4:
          // Never planned with element-wise I/O (it would spill); not instantiated for it.
          if constexpr (kVector)
            return launch(norm_kernel<T, W, kFused, kVector, 4>, plan, params, s);
          break;
      }
      break;
    case KernelVariant::kCpu:
      break;
  }
  return cudaErrorInvalidConfiguration;
}

template <typename T, typename W>
cudaError_t dispatch_flags(const NormPlan& plan, const NormProblem& problem,
                           const KernelParams& params, cudaStream_t s) {
  const bool fused = problem.op == NormOp::kFusedAddRmsNorm;
  if (fused) {
    return plan.vector_io ? dispatch_variant<T, W, true, true>(plan, params, s)
                          : dispatch_variant<T, W, true, false>(plan, params, s);
  }
  return plan.vector_io ? dispatch_variant<T, W, false, true>(plan, params, s)
                        : dispatch_variant<T, W, false, false>(plan, params, s);
}

template <typename T>
cudaError_t dispatch_weight(const NormPlan& plan, const NormProblem& problem,
                            const KernelParams& params, cudaStream_t s) {
  // No weight: any W works (the pointer is null); reuse the same-dtype instantiation.
  if (problem.has_weight && problem.w_dtype == DType::kFloat32) {
    return dispatch_flags<T, float>(plan, problem, params, s);
  }
  return dispatch_flags<T, T>(plan, problem, params, s);
}

}  // namespace

cudaError_t launch_norm(const NormPlan& plan, const NormProblem& problem, const NormArgs& args,
                        cudaStream_t stream) {
  if (problem.rows == 0 || problem.cols == 0) return cudaSuccess;
  KernelParams params{};
  params.x = args.x;
  params.out = args.out;
  params.residual = args.residual;
  params.weight = args.weight;
  params.rows = problem.rows;
  params.cols = problem.cols;
  params.ld_x = problem.ld_x;
  params.ld_out = problem.ld_out;
  params.ld_residual = problem.ld_residual;
  params.chunks_per_row = plan.chunks_per_row;
  params.threads_per_row = plan.threads_per_row;
  params.rows_per_cta = plan.rows_per_cta;
  params.chunks_per_thread = plan.chunks_per_thread;
  params.stages = plan.stages;
  params.inv_cols = 1.0f / static_cast<float>(problem.cols);
  params.eps = args.eps;
  params.inv_cols_d = 1.0 / static_cast<double>(problem.cols);
  params.use_pdl = plan.use_pdl;
  switch (problem.x_dtype) {
    case DType::kFloat32:
      return dispatch_weight<float>(plan, problem, params, stream);
    case DType::kFloat16:
      return dispatch_weight<__half>(plan, problem, params, stream);
    case DType::kBFloat16:
      return dispatch_weight<__nv_bfloat16>(plan, problem, params, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace oink
