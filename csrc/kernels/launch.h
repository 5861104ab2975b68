// The torch-free entry points of the CUDA kernels: raw pointers, 64-bit sizes, a stream.
#pragma once

#include <cuda_runtime_api.h>

#include "core/args.h"
#include "core/plan.h"
#include "core/problem.h"

namespace oink {

// Launches the plan's kernel on `stream`. Returns the launch's error code; never synchronises.
cudaError_t launch_norm(const NormPlan& plan, const NormProblem& problem, const NormArgs& args,
                        cudaStream_t stream);

// Capability, SM count and limits of CUDA device `index`, read once per device and cached.
DeviceInfo cuda_device_info(int index);

}  // namespace oink
