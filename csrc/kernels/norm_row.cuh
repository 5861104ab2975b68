// What every RMSNorm schedule does to one row, whatever the schedule: where the row lives, how a
// chunk becomes the normalised source (the fused op adds and stores the residual), the sum of
// squares, the inverse RMS and the final scaled store. The kernels in norm_forward.cu differ only
// in where chunks wait between load and use (registers, shared memory, L2), never in arithmetic, so
// every schedule gives the same bits for a row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/rows.h"
#include "device/async.cuh"
#include "device/reduce.cuh"
#include "device/vec.cuh"

namespace oink {

// One launch's parameters, in the constant bank. The fields a launch reads before its first load
// come first and together: a decode call is one dependent chain, and when the block grew from
// ~90 to ~260 bytes with the general row layouts, its hot fields spread over more
// constant-cache lines, each a miss on that chain: SASS showed 13 -> 26 constant loads before the
// first global load, and decode calls got 0.13-0.29 us slower (H200; docs/kernels.md, "Row
// addressing"). kHotParamBytes below holds the hot part to its budget.
struct KernelParams {
  // --- hot: read by every launch before or right after its first load
  const void* x;       // [M, N] rows (see the steps and strides below)
  void* out;           // [M, N] rows (x itself for the fused op)
  void* residual;      // [M, N] rows (fused op only)
  const void* weight;  // [N] or nullptr
  // The innermost leading dimension's stride of each tensor (elements): the row stride when
  // rows have one.
  int64_t x_step, out_step, residual_step;
  int64_t rows, cols, chunks_per_row;
  int threads_per_row, rows_per_cta;
  int row_dims;    // leading dimensions walked per row (1 to kMaxRowDims)
  float inv_cols;  // 1/N, rounded once on the host: a multiply instead of a division
  float eps;
  bool use_pdl;  // launched with programmatic dependent launch
  // With PDL: let the next launch start its CTAs right after this CTA's wait (the plan's
  // pdl_early_trigger); otherwise they start as this grid's CTAs exit.
  bool pdl_early_trigger;
  int slices;  // slices of a row's reduction layout (kSliceChunks chunks each)
  // --- cold: the streamed schedule's, float32 rows', rows over several dimensions
  int chunks_per_thread;  // streamed kernel: slots per thread and stream
  int stages;             // streamed kernel: rows (or row groups) in flight per CTA
  double inv_cols_d;      // 1/N in float64, for float32 rows (see NormRow::Acc)
  // Rows over 2-4 leading dimensions: the divisors of the inner sizes (row_index.count is
  // row_dims), and every dimension's strides (index 0 repeats the steps above).
  RowIndexer row_index;
  RowStrides x_strides, out_strides, residual_strides;
  // Last, so that no other field moves: the inference kernels' SASS stays byte-identical.
  float* rstd;       // [M] 1/rms (layernorm: 1/sqrt(var + eps)) per row, logical row order:
                     // ops with kSavesStats only
  float* mean;       // [M] layernorm's row means, as rstd (LayerNormSavingStatsOp only)
  const void* bias;  // [N] layernorm's bias (the weight's type: float32 or x's), or nullptr
};

// The hot fields' budget: two 64-byte constant-cache lines at most.
inline constexpr size_t kHotParamBytes = 128;
static_assert(offsetof(KernelParams, chunks_per_thread) <= kHotParamBytes,
              "the fields a decode launch reads first stay within two constant-cache lines");

// Where row `row` of x, out and the residual start (elements). Rows of one stride: a multiply
// each. Two leading dimensions (QK-norm head views [T, H, D], [B, H, S, D] views with B = 1): one
// multiply-shift division. Three or four: a loop the compiler keeps rolled, since unrolled, its
// divisions raised the registers kernels' peak and made some instantiations spill (ptxas,
// sm_100a). Everything stays inline and reads the parameters as constant-bank operands: a version
// that called a function with a reference to the parameters (__grid_constant__) read them through
// generic loads and cost every decode call about 0.25 us on the H200, layouts or not.
struct RowOffsets {
  int64_t x, out, residual;
};

__device__ __forceinline__ RowOffsets row_offsets(const KernelParams& p, int64_t row) {
  const int dims = p.row_dims;
  if (dims == 1) return {row * p.x_step, row * p.out_step, row * p.residual_step};
  uint32_t rest = static_cast<uint32_t>(row), index = 0;
  p.row_index.inner[0].divmod(rest, rest, index);
  RowOffsets at{index * p.x_step, index * p.out_step, index * p.residual_step};
#pragma unroll 1
  for (int d = 1; d < dims; ++d) {
    if (d + 1 < dims) {
      p.row_index.inner[d].divmod(rest, rest, index);
    } else {
      index = rest;  // the outermost dimension takes what is left
    }
    at.x += int64_t{index} * p.x_strides.s[d];
    at.out += int64_t{index} * p.out_strides.s[d];
    at.residual += int64_t{index} * p.residual_strides.s[d];
  }
  return at;
}

// What every row type shares (NormRow below, LayerNormRow in layernorm_row.cuh): where row `row`
// of x, out and the residual (the fused op's; nullptr for the others) start, the weight, and
// their chunk loads. T: x/out element type; W: weight element type; kVector: every chunk is a
// full, aligned 16-byte vector (else element by element, bounds-checked). The members keep the
// order NormRow had before the split: the kernels' PTX is the same (checked).
template <typename T, typename W, bool kVector>
struct RowIo {
  static constexpr int kElems = 16 / sizeof(T);
  using XVec = device::Vec<T, kElems>;
  using WVec = device::Vec<W, kElems>;

  const T* x;
  T* out;
  T* res;
  const W* weight;
  int64_t n;

  __device__ RowIo(const KernelParams& p, const RowOffsets& at, bool residual)
      : x(static_cast<const T*>(p.x) + at.x),
        out(static_cast<T*>(p.out) + at.out),
        res(residual ? static_cast<T*>(p.residual) + at.residual : nullptr),
        weight(static_cast<const W*>(p.weight)),
        n(p.cols) {}

  __device__ XVec load_x(int64_t col) const {
    return device::load_chunk<kVector, T, kElems>(x, col, n);
  }
  __device__ XVec load_residual(int64_t col) const {
    return device::load_chunk<kVector, T, kElems>(res, col, n);
  }

  // Brings the weight chunk at `col` into L1, so that load_weight(col) later hits there.
  __device__ void prefetch_weight(int64_t col) const {
    if (weight != nullptr) device::prefetch_l1(weight + col);
  }
  __device__ WVec load_weight(int64_t col) const {
    return weight != nullptr ? load_given_weight(col) : unit_weight();
  }
  // The two halves of load_weight, for loops that must issue every load before any use: a
  // per-chunk choice between a load and the constant made the compiler unpack each loaded chunk
  // before issuing the next load (SASS, 2026-11-30: the two weight chunks of a decode row were
  // two dependent round trips).
  __device__ WVec load_given_weight(int64_t col) const {  // precondition: weight != nullptr
    return device::load_chunk<kVector, W, kElems>(weight, col, n);
  }
  __device__ static WVec unit_weight() {  // no weight: every element 1
    WVec w;
#pragma unroll
    for (int e = 0; e < kElems; ++e) w.v[e] = device::from_float<W>(1.f);
    return w;
  }
  // The same ones as float32, for stores that take the weight-or-ones choice once per row
  // (with_weight below): a multiply by a constant 1 folds away.
  using Ones = device::Vec<float, kElems>;
  __device__ static Ones ones() {
    Ones w;
#pragma unroll
    for (int e = 0; e < kElems; ++e) w.v[e] = 1.f;
    return w;
  }
};

// Runs `store(weighted)` with weighted = std::true_type when the row has a weight and
// std::false_type when it has none: one uniform branch per row around a store loop, so that
// each loop is straight-line. A choice per chunk between the loaded weight and the constant 1
// (`has_weight ? w : 1`) became two PRMTs per element ahead of each multiply (SASS of the tile
// and cluster kernels, sm_90a). The registers kernel keeps its choice per chunk: with 1-2 chunks
// a thread the compiler hoists it there itself (SASS), and a second copy of its store loop made
// ptxas spill a float32 LayerNorm instance (sm_103a).
template <typename Store>
__device__ __forceinline__ void with_weight(bool has_weight, Store&& store) {
  if (has_weight) {
    store(std::true_type{});
  } else {
    store(std::false_type{});
  }
}

// The RMSNorm family's row. Op: RmsNormOp, RmsNormSavingRstdOp or FusedAddRmsNormOp
// (kernels/row_op.cuh).
template <typename T, typename W, typename Op, bool kVector>
struct NormRow : RowIo<T, W, kVector> {
  using Io = RowIo<T, W, kVector>;
  using Io::kElems;
  using Io::n;
  using Io::out;
  using Io::res;
  using typename Io::WVec;
  using typename Io::XVec;
  using Acc = device::RowAcc<T>;
  // The reduction of the row's statistic (the sum of squares).
  using Statistic = typename Op::template Statistic<Acc>;

  // Rows past the last one point at row 0 and must not be touched (callers check `active`).
  __device__ NormRow(const KernelParams& p, int64_t row, bool active)
      : NormRow(p, row_offsets(p, active ? row : 0)) {}
  __device__ NormRow(const KernelParams& p, const RowOffsets& at) : Io(p, at, Op::kAddsResidual) {}

  // Fused op: residual + x rounded to T, stored to the residual; the value that gets normalised.
  __device__ XVec add_residual(int64_t col, XVec v, const XVec& r) const {
    const auto a = device::to_floats(v);
    const auto b = device::to_floats(r);
#pragma unroll
    for (int e = 0; e < kElems; ++e) v.v[e] = device::from_float<T>(a.v[e] + b.v[e]);
    device::store_chunk<kVector, T, kElems>(res, col, n, v);
    return v;
  }

  // The row's statistics, as the schedules that are generic over the row type see them
  // (norm_row_group.cuh's registers kernel; layernorm_row.cuh has the other row type): one
  // reduction, whose per-thread terms are first_terms' (the squares), finished into Stats by
  // finish_first (rstd). store_normalized takes the Stats. (Returned by value: an output
  // parameter changed the registers kernel's PTX for RMSNorm rows.)
  using Stats = Acc;
  static constexpr int kReductions = 1;
  __device__ static Acc first_terms(const XVec& v, Acc acc) { return add_squares(v, acc); }
  __device__ static Stats finish_first(Acc total, const KernelParams& p) {
    return inv_rms(total, p);
  }

  // Squares in increasing element order: the per-thread half of the fixed reduction order.
  __device__ static Acc add_squares(const XVec& v, Acc acc) {
    const auto floats = device::to_floats(v);
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const Acc f = floats.v[e];
      if constexpr (std::is_same_v<Acc, double>) {
        acc = fma(f, f, acc);
      } else {
        acc = fmaf(f, f, acc);
      }
    }
    return acc;
  }

  // Once per row, so precision costs nothing: a correctly rounded rsqrt in float32 (rsqrtf's
  // 2-ulp error showed in float32 outputs on the H200), float64 for float32 rows.
  __device__ static Acc inv_rms(Acc sum_sq, const KernelParams& p) {
    if constexpr (std::is_same_v<Acc, double>) {
      return rsqrt(sum_sq * p.inv_cols_d + static_cast<double>(p.eps));
    } else {
      return __frsqrt_rn(sum_sq * p.inv_cols + p.eps);
    }
  }

  // rmsnorm_forward: row `row`'s rstd, rounded once to float32, by the one thread per row that
  // `writer` names. Nothing for the other ops (compiled out).
  __device__ static void save_stats(const KernelParams& p, int64_t row, bool writer, Acc rstd) {
    if constexpr (Op::kSavesStats) {
      if (writer) p.rstd[row] = static_cast<float>(rstd);
    }
  }

  // WV: WVec, or the weight already converted to float (Vec<float, kElems>: same values; Ones).
  template <typename WV>
  __device__ void store_normalized(int64_t col, const XVec& v, const WV& w, Acc rstd) const {
    const auto xs = device::to_floats(v);
    const auto ws = device::to_floats(w);
    XVec y;
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      y.v[e] = device::from_float<T>(static_cast<float>(xs.v[e] * rstd * ws.v[e]));
    }
    device::store_chunk<kVector, T, kElems>(out, col, n, y);
  }
};

// First thing in every kernel, once the addresses are worked out. CTA 0 asks the L2 for the
// weight (a parameter no preceding kernel is expected to write, and a prefetch is coherent
// anyway): with PDL while the preceding kernel drains; without it, while the rows' loads and
// reduction run. The registers kernel reads its weight only after the row's barrier, so a weight
// the L2 no longer holds (between a model's GEMMs, whose weights stream through the L2) would
// otherwise add a whole HBM round trip to every row there. Then, with PDL, every CTA waits for
// the preceding kernel before touching memory, and, where the plan says so
// (pdl_early_trigger_pays in core/plan.cpp), lets the next PDL launch start its CTAs. Without
// that signal they start as this grid's CTAs exit (the streamed kernel, whose CTAs persist,
// signals after its last row).
template <typename W, bool kVector>
__device__ __forceinline__ void begin_rows(const KernelParams& p) {
  if (kVector && p.weight != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    device::prefetch_l2(p.weight, static_cast<uint32_t>(p.cols * sizeof(W)));
  }
  device::pdl_wait();
  if (p.pdl_early_trigger) device::pdl_launch_dependents();
}

}  // namespace oink
