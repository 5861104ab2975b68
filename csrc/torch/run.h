// Planning and running a forward row op (rmsnorm, the fused op, layernorm on CUDA) on the
// device of its tensors: the plan (the CPU's, or the device's with the runtime's kernel images),
// the launch on the current stream, and the process-wide launch options (oink.set_pdl).
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <string>

#ifdef OINK_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "core/args.h"
#include "core/plan.h"
#include "core/problem.h"

namespace oink {

using torch::stable::Tensor;

// oink.set_pdl: sets whether later launches may use programmatic dependent launch; returns the
// previous setting.
bool exchange_allow_pdl(bool enabled);
LaunchOptions launch_options();

// First thing in every op: a CUDA tensor needs a build with CUDA kernels (else a clear error).
void require_kernels_for(const char* op, const Tensor& x);

// The plan of a call on x's device.
NormPlan plan_call(const char* op, const NormProblem& problem, const Tensor& x);

// The device make_plan() sees for x (DeviceInfo{} on the CPU).
DeviceInfo device_info_of(const Tensor& x);

// Runs the problem on x's device: the CPU's row loop, or the plan's kernel on the current
// stream. A failed launch raises, naming the op and the plan.
void run_forward(const char* op, const NormProblem& problem, const NormArgs& args, const Tensor& x);

#ifdef OINK_WITH_CUDA
// The current CUDA stream of x's device: where every launch goes.
cudaStream_t current_stream_of(const Tensor& x);

// Nothing for cudaSuccess; otherwise clears the error (none is left pending for the caller's
// next CUDA call) and raises, naming the op, the error and `detail` (the plan, where known).
void check_launch(const char* op, cudaError_t err, const std::string& detail = "");
#endif

}  // namespace oink
