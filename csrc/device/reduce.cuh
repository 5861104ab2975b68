// Reductions. The order of every addition is fixed by the thread layout alone, so results are
// bitwise reproducible and independent of how many rows a launch holds (batch invariance).
#pragma once

#include "device/vec.cuh"

namespace oink::device {

// Sum over aligned groups of `width` lanes (a power of two <= 32) by an xor butterfly.
// Result: every lane of the group holds the same bits (a + b == b + a at each step).
// Precondition: all 32 lanes of the warp call it (full-mask shuffles). Acc: float or double.
template <typename Acc>
__device__ __forceinline__ Acc group_sum(Acc v, int width) {
  for (int offset = width >> 1; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Sum over the `threads_per_row` consecutive threads that share a row (a power of two <= 1024).
// Rows wider than a warp combine their warps' sums through `warp_sums` (>= blockDim.x / 32
// values, 16-byte aligned) in warp order, so every thread of the row returns the same bits. The
// warp sums are read 16 bytes at a time and the warp index found with a mask, not a division:
// this runs once per row on every thread, and the generic version cost ~60 instructions a row
// (SASS, 2026-11-30).
// Precondition: every thread of the block calls it (it may contain a __syncthreads).
template <typename Acc>
__device__ __forceinline__ Acc row_sum(Acc v, int threads_per_row, Acc* warp_sums) {
  if (threads_per_row <= 32) return group_sum(v, threads_per_row);
  v = group_sum(v, 32);
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) warp_sums[warp] = v;
  __syncthreads();
  const int warps_per_row = threads_per_row / 32;  // a power of two, 2 to 32
  const Acc* first = warp_sums + (warp & ~(warps_per_row - 1));
  constexpr int kPerVector = 16 / sizeof(Acc);  // 4 floats or 2 doubles
  Acc total = 0;
  if (warps_per_row % kPerVector == 0) {  // then `first` is 16-byte aligned too
#pragma unroll 2
    for (int w = 0; w < warps_per_row; w += kPerVector) {
      const Vec<Acc, kPerVector> q = *reinterpret_cast<const Vec<Acc, kPerVector>*>(first + w);
#pragma unroll
      for (int k = 0; k < kPerVector; ++k) total += q.v[k];
    }
  } else {
    for (int w = 0; w < warps_per_row; ++w) total += first[w];
  }
  return total;
}

}  // namespace oink::device
