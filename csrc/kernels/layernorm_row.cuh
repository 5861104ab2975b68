// What the LayerNorm forward does to one row: the row type the registers schedule
// (norm_row_group.cuh) runs for LayerNormOp, beside NormRow (norm_row.cuh) for RMSNorm. Same
// addressing, loads and weight handling as NormRow; the statistics are two reductions over the
// row the kernel holds in registers: the sum (the mean), then the sum of squared deviations from
// that mean (the biased variance, as F.layer_norm; two passes over registers, so no cancellation
// as in sum(x^2) - N mean^2), each with the fixed lane order of device::row_reduce.
//
//   y = (x - mean) * rstd * w + b,   rstd = 1 / sqrt(var + eps),
//
// in the accumulation type (float32 for 16-bit rows, float64 for float32 rows, as NormRow),
// rounded once to the row's type. Addressing and loads are RowIo's (norm_row.cuh), as NormRow's.
// The weight and the bias share one type W: x's where both are given in x's dtype (as a model
// in bfloat16 holds them: no copy per call, and a chunk's parameters are one 16-byte load each),
// else float32, to which the binding widens them (exact for every narrower dtype). Kernels are
// instantiated for those two (core/kernel_table.h, KernelWeight::kFloat32OrX); the bias is
// KernelParams::bias.
#pragma once

#include <cstdint>
#include <type_traits>

#include "device/vec.cuh"
#include "kernels/norm_row.cuh"

namespace oink {

template <typename T, typename W, typename Op, bool kVector>
struct LayerNormRow : RowIo<T, W, kVector> {
  static_assert(!Op::kAddsResidual, "layernorm has no fused residual");
  using Io = RowIo<T, W, kVector>;
  using Io::kElems;
  using Io::n;
  using Io::out;
  using typename Io::WVec;
  using typename Io::XVec;
  using Acc = device::RowAcc<T>;
  using Statistic = typename Op::template Statistic<Acc>;

  struct Stats {
    Acc mean;
    Acc rstd;
  };
  static constexpr int kReductions = 2;

  const W* bias;

  __device__ LayerNormRow(const KernelParams& p, int64_t row, bool active)
      : LayerNormRow(p, row_offsets(p, active ? row : 0)) {}
  __device__ LayerNormRow(const KernelParams& p, const RowOffsets& at)
      : Io(p, at, false), bias(static_cast<const W*>(p.bias)) {}

  // Reduction 1: the elements, in increasing order.
  __device__ static Acc first_terms(const XVec& v, Acc acc) {
#pragma unroll
    for (int e = 0; e < kElems; ++e) acc += static_cast<Acc>(device::to_float(v.v[e]));
    return acc;
  }
  // The mean is rounded here, by an explicit multiply that the compiler may not contract into
  // the subtractions that use it: with `total * inv_cols` it fused that product into some of the
  // `x - mean` (an fma of -total, inv_cols and x, which rounds once instead of twice) and not
  // into others, as the kernel's code layout let it, so layernorm and layernorm_forward (one
  // more use of the mean: its store) disagreed in the last bit of some outputs (H200 sweep).
  __device__ static Stats finish_first(Acc total, const KernelParams& p) {
    if constexpr (std::is_same_v<Acc, double>) {
      return {__dmul_rn(total, p.inv_cols_d), Acc(0)};
    } else {
      return {__fmul_rn(total, p.inv_cols), Acc(0)};
    }
  }
  // Reduction 2: the squared deviations from the mean, in increasing order, of the chunk at
  // `col`. Element-wise chunks past the row's end hold zeros (device::load_chunk), which add
  // nothing to reduction 1 but would add mean^2 here: they are skipped.
  __device__ Acc second_terms(int64_t col, const XVec& v, Acc acc, const Stats& stats) const {
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      if constexpr (!kVector) {
        if (col + e >= n) break;
      }
      const Acc d = static_cast<Acc>(device::to_float(v.v[e])) - stats.mean;
      if constexpr (std::is_same_v<Acc, double>) {
        acc = fma(d, d, acc);
      } else {
        acc = fmaf(d, d, acc);
      }
    }
    return acc;
  }
  // Once per row, so precision costs nothing: var + eps as one explicit fma (one rounding, the
  // same in every kernel, whatever the compiler would contract), then float32's correctly
  // rounded rsqrt, as NormRow::inv_rms; in float64 a correctly rounded square root and division
  // (within an ulp of float64, far below the float32 rounding that follows), since
  // rsqrt(double)'s call into its slow path spilled registers in the stats-saving kernel (ptxas,
  // sm_90a).
  __device__ static Stats finish_second(Acc total, const KernelParams& p, Stats stats) {
    if constexpr (std::is_same_v<Acc, double>) {
      stats.rstd = 1.0 / sqrt(fma(total, p.inv_cols_d, static_cast<double>(p.eps)));
    } else {
      stats.rstd = __frsqrt_rn(fmaf(total, p.inv_cols, p.eps));
    }
    return stats;
  }

  // layernorm_forward: the row's mean and rstd, each rounded once to float32, by the one thread
  // per row that `writer` names. Nothing for layernorm itself (compiled out).
  __device__ static void save_stats(const KernelParams& p, int64_t row, bool writer,
                                    const Stats& stats) {
    if constexpr (Op::kSavesStats) {
      if (writer) {
        p.mean[row] = static_cast<float>(stats.mean);
        p.rstd[row] = static_cast<float>(stats.rstd);
      }
    }
  }

  // WV: WVec, or the weight already converted to float (same values). The bias chunk is read
  // here, next to its one use.
  template <typename WV>
  __device__ void store_normalized(int64_t col, const XVec& v, const WV& w,
                                   const Stats& stats) const {
    WVec b;
    if (bias != nullptr) {
      b = device::load_chunk<kVector, W, kElems>(bias, col, n);
    } else {
#pragma unroll
      for (int e = 0; e < kElems; ++e) b.v[e] = device::from_float<W>(0.f);
    }
    XVec y;
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      // (x - mean) * rstd: a subtraction, then a product; neither can be contracted.
      const Acc xhat = (static_cast<Acc>(device::to_float(v.v[e])) - stats.mean) * stats.rstd;
      const Acc we = static_cast<Acc>(device::to_float(w.v[e]));
      const Acc be = static_cast<Acc>(device::to_float(b.v[e]));
      if constexpr (std::is_same_v<Acc, double>) {
        y.v[e] = static_cast<T>(fma(xhat, we, be));
      } else {
        y.v[e] = device::from_float<T>(fmaf(xhat, we, be));
      }
    }
    device::store_chunk<kVector, T, kElems>(out, col, n, y);
  }
};

}  // namespace oink
