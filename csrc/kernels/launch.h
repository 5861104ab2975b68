// The torch-free entry points of the CUDA kernels: raw pointers, 64-bit sizes, a stream.
#pragma once

#include <cuda_runtime_api.h>

#include "core/args.h"
#include "core/backward_plan.h"
#include "core/plan.h"
#include "core/problem.h"

namespace oink {

// Launches the plan's kernel on `stream`. Returns the launch's error code; never synchronises.
cudaError_t launch_norm(const NormPlan& plan, const NormProblem& problem, const NormArgs& args,
                        cudaStream_t stream);

// The image the CUDA runtime runs for the kernel `plan` selects on `device` (cudaFuncAttributes),
// asked once per kernel and device. cudaErrorNoKernelImageForDevice (or another error) when this
// build holds no image for the device.
cudaError_t kernel_image(const NormPlan& plan, const NormProblem& problem, int device,
                         KernelImage* image);

// make_plan() with the runtime's answer for the kernel images: what the binding and the bench
// tools plan with. Throws std::runtime_error when the device has no image.
NormPlan plan_on_device(const NormProblem& problem, const DeviceInfo& info, int device,
                        const LaunchOptions& options = {});

// A backward call's pointers (sizes and strides: NormBackwardProblem).
struct BackwardArgs {
  const void* dy = nullptr;
  const void* x = nullptr;
  const void* weight = nullptr;  // [N] or nullptr (layernorm: widened to float32)
  const float* rstd = nullptr;   // [M], the forward's
  const float* mean = nullptr;   // [M], layernorm_forward's (layernorm only)
  void* dx = nullptr;
  // backward_partials_bytes(plan, problem) of scratch: the weight's partials, then the bias's.
  void* partials = nullptr;
  void* bias_partials = nullptr;
  // The looped plan's [M] row sums, at backward_row_sums_offset in the same scratch; else null.
  void* row_sums = nullptr;
  void* dweight = nullptr;  // [N] of dweight_dtype (the weight's), or nullptr without a weight
  void* dbias = nullptr;    // [N] of dbias_dtype (the bias's), layernorm with a bias only
  DType dweight_dtype = DType::kBFloat16;
  DType dbias_dtype = DType::kBFloat16;
};

// Launches the backward's kernels (the rows, or the looped pair, then the weight's and the bias's
// partials) on
// `stream`. Returns the first launch error; never synchronises.
cudaError_t launch_norm_backward(const BackwardPlan& plan, const NormBackwardProblem& problem,
                                 const BackwardArgs& args, cudaStream_t stream);

// Capability, SM count and limits of CUDA device `index`, read once per device and cached.
DeviceInfo cuda_device_info(int index);

}  // namespace oink
