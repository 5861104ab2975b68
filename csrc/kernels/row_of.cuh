// The row type of a row op (row_op.cuh, kFamily): NormRow (norm_row.cuh) for the RMSNorm family,
// LayerNormRow (layernorm_row.cuh) for LayerNorm. The schedules that are generic over the row
// type (the registers kernel, the tile) take their row through it.
#pragma once

#include <type_traits>

#include "kernels/layernorm_row.cuh"
#include "kernels/norm_row.cuh"
#include "kernels/row_op.cuh"

namespace oink {

template <typename T, typename W, typename Op, bool kVector>
using RowOf = std::conditional_t<Op::kFamily == RowFamily::kLayerNorm,
                                 LayerNormRow<T, W, Op, kVector>, NormRow<T, W, Op, kVector>>;

}  // namespace oink
