// Row ops: what tells the ops a schedule runs apart, as types the kernels are templates over (in
// place of a flag per op). A row op says which row streams a row reads and writes besides x and
// out, which reduction its statistics take, and names the row type that does its arithmetic
// (Row: how values are summed, scaled and stored; NormRow for RMSNorm and the fused add,
// LayerNormRow for LayerNorm). A schedule asks the op, never the op's name: a new op of a family
// is a new type here plus its instantiations in norm_forward.cu's select_op.
#pragma once

#include "device/reduce.cuh"
#include "kernels/layernorm_row.cuh"
#include "kernels/norm_row.cuh"

namespace oink {

// The family an op's row type belongs to, for the schedules that take one family only (two_pass
// and the cluster: RMSNorm's) and for the kernel table's instantiation sets.
enum class RowFamily { kRmsNorm, kLayerNorm };

// y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps).
struct RmsNormOp {
  static constexpr RowFamily kFamily = RowFamily::kRmsNorm;
  static constexpr bool kAddsResidual = false;
  static constexpr int kStreams = 1;  // row streams loaded: x
  // Writes each row's statistics (float32) to KernelParams::rstd (and mean): rmsnorm_forward
  // and layernorm_forward, for the backward pass. A type of its own, not a flag read at run time:
  // the inference ops' kernels carry no trace of it (a decode call's parameter reads are on its
  // critical path, norm_row.cuh).
  static constexpr bool kSavesStats = false;
  template <typename Acc>
  using Statistic = device::Sum<Acc>;  // of the squares
  template <typename T, typename W, bool kVector>
  using Row = NormRow<T, W, RmsNormOp, kVector>;
};

// rmsnorm that also saves rstd per row (oink::rmsnorm_forward): the same bits in `out`.
struct RmsNormSavingRstdOp : RmsNormOp {
  static constexpr bool kSavesStats = true;
  template <typename T, typename W, bool kVector>
  using Row = NormRow<T, W, RmsNormSavingRstdOp, kVector>;
};

// vLLM's fused_add_rms_norm, in place: residual <- x + residual (rounded to x's type), then
// x <- rmsnorm(residual).
struct FusedAddRmsNormOp {
  static constexpr RowFamily kFamily = RowFamily::kRmsNorm;
  static constexpr bool kAddsResidual = true;
  static constexpr int kStreams = 2;  // row streams loaded: x and the residual
  static constexpr bool kSavesStats = false;
  template <typename Acc>
  using Statistic = device::Sum<Acc>;
  template <typename T, typename W, bool kVector>
  using Row = NormRow<T, W, FusedAddRmsNormOp, kVector>;
};

// y = (x - mean) * rstd * weight + bias over the row (kernels/layernorm_row.cuh): two
// reductions of one Sum each, the mean's and the squared deviations'. The registers and tile
// schedules (core/plan.cpp).
struct LayerNormOp {
  static constexpr RowFamily kFamily = RowFamily::kLayerNorm;
  static constexpr bool kAddsResidual = false;
  static constexpr int kStreams = 1;
  static constexpr bool kSavesStats = false;
  template <typename Acc>
  using Statistic = device::Sum<Acc>;
  template <typename T, typename W, bool kVector>
  using Row = LayerNormRow<T, W, LayerNormOp, kVector>;
};

// layernorm that also saves each row's mean and rstd (oink::layernorm_forward).
struct LayerNormSavingStatsOp : LayerNormOp {
  static constexpr bool kSavesStats = true;
  template <typename T, typename W, bool kVector>
  using Row = LayerNormRow<T, W, LayerNormSavingStatsOp, kVector>;
};

// The row type an op names (for the schedules that are generic over it: registers, the tile).
template <typename T, typename W, typename Op, bool kVector>
using RowOf = typename Op::template Row<T, W, kVector>;

}  // namespace oink
