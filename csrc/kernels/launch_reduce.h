// The torch-free entry point of the reduce-then-map row kernels (softmax, cross-entropy; core/
// row_reduce.h): raw pointers, 64-bit strides, a stream.
#pragma once

#include <cuda_runtime_api.h>

#include "core/reduce_plan.h"
#include "core/row_reduce.h"

namespace oink {

// Launches the kernel-table entry `plan` names (kernels/row_reduce.cu) on `stream`. Returns the
// launch's error code (cudaErrorInvalidValue for a plan that names no entry); never synchronises.
cudaError_t launch_reduce(const ReducePlan& plan, const ReduceProblem& problem,
                          const ReduceArgs& args, cudaStream_t stream);

}  // namespace oink
