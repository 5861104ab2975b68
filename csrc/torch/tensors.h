// New tensors for the ops' results.
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/rows.h"

namespace oink {

using torch::stable::Tensor;

// A new uninitialised tensor on x's device: `dtype` an aoti_torch dtype code.
Tensor empty_on(const Tensor& x, int32_t dtype, int64_t dims, const int64_t* sizes,
                const int64_t* strides);

// A new uninitialised tensor of x's dtype and device with the given shape and strides.
Tensor empty_strided_like(const Tensor& x, const int64_t* sizes, const int64_t* strides);

// A row op's output (docs/contract.md): x's shape and strides when x's rows have one row stride, so
// torch.compile and CUDA graphs see one stable layout whatever path ran; otherwise dense in x's
// logical order. python/oink/_layout.py's rmsnorm_output returns the same.
Tensor output_for(const Tensor& x, const RowView& x_rows);

// One value per row, in x's logical row order: x.shape[:-1], contiguous, float32 (float64 for
// float64 rows): the statistics the forward ops save for the backward ones. NaN for rows of
// N = 0 (0 / 0, as PyTorch's); uninitialised otherwise, for the kernels to write.
Tensor per_row_for(const Tensor& x, DType x_dtype);

}  // namespace oink
