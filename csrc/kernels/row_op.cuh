// Row ops: what tells the ops a schedule runs apart, as types the kernels are templates over (in
// place of a flag per op). A row op says which row streams a row reads and writes besides x and
// out, and which reduction its statistic takes; the arithmetic on a chunk (how values are squared,
// scaled and stored) lives in the row type of the op's family (NormRow for RMSNorm and the fused
// add). A schedule asks the op, never the op's name: a new op of the family is a new type here
// plus its instantiations in rmsnorm.cu's select_op.
#pragma once

#include "device/reduce.cuh"

namespace oink {

// y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps).
struct RmsNormOp {
  static constexpr bool kAddsResidual = false;
  static constexpr int kStreams = 1;  // row streams loaded: x
  // Writes each row's rstd (float32) to KernelParams::rstd: rmsnorm_forward, for the backward
  // pass. A type of its own, not a flag read at run time: the inference ops' kernels carry no
  // trace of it (a decode call's parameter reads are on its critical path, norm_row.cuh).
  static constexpr bool kSavesRstd = false;
  template <typename Acc>
  using Statistic = device::Sum<Acc>;  // of the squares
};

// rmsnorm that also saves rstd per row (oink::rmsnorm_forward): the same bits in `out`.
struct RmsNormSavingRstdOp : RmsNormOp {
  static constexpr bool kSavesRstd = true;
};

// vLLM's fused_add_rms_norm, in place: residual <- x + residual (rounded to x's type), then
// x <- rmsnorm(residual).
struct FusedAddRmsNormOp {
  static constexpr bool kAddsResidual = true;
  static constexpr int kStreams = 2;  // row streams loaded: x and the residual
  static constexpr bool kSavesRstd = false;
  template <typename Acc>
  using Statistic = device::Sum<Acc>;
};

}  // namespace oink
