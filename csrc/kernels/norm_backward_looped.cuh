// The looped backward (core/backward_plan.h, backward_looped): rows longer than a cluster holds,
// and unaligned rows longer than the element-wise row kernel holds. Two kernels, then the
// partials' reduction of norm_backward.cuh; no cluster and no shared-memory staging, so any
// device runs them.
//
// norm_backward_row_sums_kernel: one CTA of kBackwardMaxThreads threads per row. Lane t folds
// chunks t, t + 512, ... in increasing order (kLoopedLoadsInFlight of them loaded at once, folded
// in that order), then device::row_reduce's fixed tree: a row's sums depend on its values, N and
// the dtypes only (batch invariance). Thread 0 writes them to row_sums[row].
//
// norm_backward_columns_kernel: a grid of column_tiles x blocks CTAs of kLoopedColumnThreads
// threads; a thread owns one chunk of columns and walks its weight-gradient block's rows in
// order: the row's saved statistics and sums give its coefficients (GradOf::finish, as in
// norm_backward_kernel), then dx, and the chunk's weight (and bias) partials grow by the same
// terms in the same row order as the row kernel's. No barrier: a thread past the row's chunks
// returns at once.
//
// x and dy are read twice (5 passes over the row bytes, against 3 in one-pass kernels); a row
// longer than 262144 elements does not fit a cluster's shared memory to be read once.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/backward_plan.h"
#include "kernels/norm_backward.cuh"

namespace oink {

// Chunks a thread of the row-sums kernel loads before it folds them (bytes in flight: 4 chunks
// of x and dy, 128 bytes a thread).
inline constexpr int kLoopedLoadsInFlight = 4;

template <template <typename> class GradOf, typename T, typename W, bool kVector>
__global__ void __launch_bounds__(kBackwardMaxThreads)
    norm_backward_row_sums_kernel(const BackwardParams p) {
  constexpr int kElems = 16 / sizeof(T);
  using XVec = device::Vec<T, kElems>;
  using WVec = device::Vec<W, kElems>;
  using Acc = device::RowAcc<T>;
  using Grad = GradOf<Acc>;
  using Sums = typename Grad::Combine::Value;
  static_assert(kBackwardMaxThreads / 32 <= kMaxWarpsPerCta, "a warp value per warp");
  __shared__ alignas(16) Sums warp_sums[kMaxWarpsPerCta];

  const int64_t row = blockIdx.x;
  const RowIndex at = split_row(p.row_index, row);
  const T* const xr = static_cast<const T*>(p.x) + row_offset(p.row_index, at, p.x_strides);
  const T* const dyr = static_cast<const T*>(p.dy) + row_offset(p.row_index, at, p.dy_strides);
  const W* const weight = static_cast<const W*>(p.weight);
  const typename Grad::Stats stats = Grad::widen(Grad::load(p, row));
  const int64_t n = p.cols;
  constexpr int64_t kStep = int64_t{kLoopedLoadsInFlight} * kBackwardMaxThreads;

  Sums sums = Grad::Combine::identity();
  for (int64_t first = threadIdx.x; first < p.chunks_per_row; first += kStep) {
    XVec xv[kLoopedLoadsInFlight], dyv[kLoopedLoadsInFlight];
#pragma unroll
    for (int k = 0; k < kLoopedLoadsInFlight; ++k) {
      const int64_t c = first + int64_t{k} * kBackwardMaxThreads;
      if (c < p.chunks_per_row) {
        xv[k] = device::load_chunk<kVector, T, kElems>(xr, c * kElems, n);
        dyv[k] = device::load_chunk<kVector, T, kElems>(dyr, c * kElems, n);
      }
    }
#pragma unroll
    for (int k = 0; k < kLoopedLoadsInFlight; ++k) {
      const int64_t c = first + int64_t{k} * kBackwardMaxThreads;
      if (c < p.chunks_per_row) {
        const WVec wv = weight_chunk_at<kVector, W, kElems>(weight, c * kElems, n);
#pragma unroll
        for (int e = 0; e < kElems; ++e) {
          const Acc g = static_cast<Acc>(device::to_float(dyv[k].v[e])) *
                        static_cast<Acc>(device::to_float(wv.v[e]));
          Grad::add_terms(static_cast<Acc>(device::to_float(xv[k].v[e])), g, stats, sums);
        }
      }
    }
  }
  sums = device::row_reduce<typename Grad::Combine>(sums, kBackwardMaxThreads, warp_sums);
  if (threadIdx.x == 0) static_cast<Sums*>(p.row_sums)[row] = sums;
}

template <template <typename> class GradOf, typename T, typename W, bool kVector>
__global__ void __launch_bounds__(kLoopedColumnThreads)
    norm_backward_columns_kernel(const BackwardParams p) {
  constexpr int kElems = 16 / sizeof(T);
  using XVec = device::Vec<T, kElems>;
  using WVec = device::Vec<W, kElems>;
  using Acc = device::RowAcc<T>;
  using AccVec = device::Vec<Acc, kElems>;
  using Grad = GradOf<Acc>;
  using Sums = typename Grad::Combine::Value;

  const int64_t chunk = int64_t{blockIdx.x} * kLoopedColumnThreads + threadIdx.x;
  if (chunk >= p.chunks_per_row) return;
  const int64_t block = blockIdx.y;
  const int64_t col = chunk * kElems, n = p.cols;
  const WVec wv = weight_chunk_at<kVector, W, kElems>(static_cast<const W*>(p.weight), col, n);
  const Sums* const row_sums = static_cast<const Sums*>(p.row_sums);
  Acc inv_cols;
  if constexpr (std::is_same_v<Acc, double>) {
    inv_cols = p.inv_cols_d;
  } else {
    inv_cols = p.inv_cols;
  }

  const bool weight_grad = p.partials != nullptr;
  const bool bias_grad = Grad::kBiasGrad && p.bias_partials != nullptr;
  Acc partial[kElems], bias_partial[kElems];
#pragma unroll
  for (int e = 0; e < kElems; ++e) partial[e] = bias_partial[e] = 0;

  const int64_t first = block * p.block_rows;
  const int64_t end = first + p.block_rows < p.rows ? first + p.block_rows : p.rows;
  for (int64_t row = first; row < end; ++row) {
    const RowIndex at = split_row(p.row_index, row);
    const T* const xr = static_cast<const T*>(p.x) + row_offset(p.row_index, at, p.x_strides);
    const T* const dyr = static_cast<const T*>(p.dy) + row_offset(p.row_index, at, p.dy_strides);
    T* const dxr = static_cast<T*>(p.dx) + row_offset(p.row_index, at, p.dx_strides);
    const typename Grad::Stats stats = Grad::widen(Grad::load(p, row));
    const typename Grad::Coef coef = Grad::finish(row_sums[row], stats, inv_cols);
    const XVec xv = device::load_chunk<kVector, T, kElems>(xr, col, n);
    const XVec dyv = device::load_chunk<kVector, T, kElems>(dyr, col, n);
    XVec out;
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const Acc xe = static_cast<Acc>(device::to_float(xv.v[e]));
      const Acc dye = static_cast<Acc>(device::to_float(dyv.v[e]));
      const Acc g = dye * static_cast<Acc>(device::to_float(wv.v[e]));
      out.v[e] = round_to<T>(Grad::dx(xe, g, stats, coef));
      if (weight_grad) partial[e] = Grad::weight_term(xe, dye, stats, partial[e]);
      if constexpr (Grad::kBiasGrad) {
        if (bias_grad) bias_partial[e] = Grad::bias_term(dye, bias_partial[e]);
      }
    }
    device::store_chunk<kVector, T, kElems>(dxr, col, n, out);
  }

  auto store_partials = [&](void* partials, const Acc(&values)[kElems]) {
    AccVec v;
#pragma unroll
    for (int e = 0; e < kElems; ++e) v.v[e] = values[e];
    device::store_chunk<kVector, Acc, kElems>(static_cast<Acc*>(partials) + block * n, col, n, v);
  };
  if (weight_grad) store_partials(p.partials, partial);
  if (bias_grad) store_partials(p.bias_partials, bias_partial);
}

}  // namespace oink
