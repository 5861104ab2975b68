// The torch-free entry points of the two small kernels around the cross-entropy row kernels
// (torch/loss_ops.cpp): the mean's count of non-ignored rows before them, the rows' losses reduced
// to one after them. Each is one launch of one CTA: a few KiB of targets or losses, where the
// torch expressions they replace took two launches each (ne, sum; sum, div).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace oink {

// out[0] = the number of rows whose target is not ignore_index, out[1] = 1 / out[0] (float32;
// rounded once from the exact count). Never synchronises.
cudaError_t launch_count_targets(const int64_t* target, int64_t rows, int64_t ignore_index,
                                 float* out, cudaStream_t stream);

// *out = sum(loss[0 .. rows)) [/ count[0]], summed in float64 in a fixed order (the same bits on
// every run), divided in float64 and rounded to `out_dtype` through float32 (as the row kernels
// round). count: nullptr for the sum. out_dtype: float16, bfloat16 or float32.
cudaError_t launch_reduce_loss(const float* loss, int64_t rows, const float* count, void* out,
                               DType out_dtype, cudaStream_t stream);

}  // namespace oink
