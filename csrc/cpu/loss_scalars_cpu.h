// The cross-entropy's scalars on the CPU (kernels/launch_loss_scalars.h has the CUDA ones): the
// mean's count of non-ignored rows, and the rows' losses reduced to one. Per-row losses and the
// count are float32, float64 where the logits are float64 (`wide`).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace oink::cpu {

// out[0] = the number of rows whose target is not ignore_index, out[1] = 1 / out[0], each
// rounded once from the exact count; float64 where `wide`, else float32.
void count_targets(const int64_t* target, int64_t rows, int64_t ignore_index, bool wide, void* out);

// *out = sum(loss) [/ count[0]] (count nullptr: the sum), summed and divided in float64 and
// rounded once to out_dtype as the row kernels round (cpu/host_elem.h, store_result).
void reduce_loss(const void* loss, int64_t rows, const void* count, bool wide, void* out,
                 DType out_dtype);

}  // namespace oink::cpu
