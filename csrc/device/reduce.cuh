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

// The sums of a row's warps, `first[0 .. warps_per_row)`, added in warp order: the last level of
// the reduction tree, the same in every schedule. Read 16 bytes at a time where aligned (the same
// additions in the same order).
template <typename Acc>
__device__ __forceinline__ Acc sum_in_warp_order(const Acc* first, int warps_per_row) {
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

// Sum over the `threads_per_row` consecutive threads that share a row (a power of two <= 1024).
// Rows wider than a warp combine their warps' sums through `warp_sums` (>= blockDim.x / 32
// values, 16-byte aligned) in warp order, so every thread of the row returns the same bits. The
// warp index is found with a mask, not a division: this runs once per row on every thread, and
// the generic version cost ~60 instructions a row (SASS, 2026-11-30).
// Precondition: every thread of the block calls it (it may contain a __syncthreads).
template <typename Acc>
__device__ __forceinline__ Acc row_sum(Acc v, int threads_per_row, Acc* warp_sums) {
  if (threads_per_row <= 32) return group_sum(v, threads_per_row);
  v = group_sum(v, 32);
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) warp_sums[warp] = v;
  __syncthreads();
  const int warps_per_row = threads_per_row / 32;  // a power of two, 2 to 32
  return sum_in_warp_order(warp_sums + (warp & ~(warps_per_row - 1)), warps_per_row);
}

// row_sum() for a thread that plays kLanes lanes of the row's layout at once (the tile
// schedule): lane j of this thread is lane `(group base) + j * 32 / kLanes` of its lane warp, so
// the first log2(kLanes) steps of row_sum()'s butterfly (offsets 16, 8, ...) pair lanes inside
// this thread and are done here, in the same pairs; the remaining steps are the shuffles of a
// 32 / kLanes wide butterfly; each warp of threads holds kLanes lane-warp sums (in its lanes
// 0, 32 / kLanes, ...), stored in lane-warp order and added in warp order as row_sum() does.
// Same additions, same order, same bits as row_sum() over threads_per_row threads.
// Preconditions: threads_per_row >= 32 * kLanes (a row's threads fill whole warps); every thread
// of the block calls it (it contains a __syncthreads); `warp_sums` holds >= blockDim.x * kLanes
// / 32 values, 16-byte aligned.
template <int kLanes, typename Acc>
__device__ __forceinline__ Acc folded_row_sum(Acc (&lane_sums)[kLanes], int threads_per_row,
                                              Acc* warp_sums) {
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "a power of two");
  constexpr int kGroup = 32 / kLanes;  // threads that share one lane warp
#pragma unroll
  for (int half = kLanes / 2; half > 0; half /= 2) {
#pragma unroll
    for (int j = 0; j < half; ++j) lane_sums[j] += lane_sums[j + half];
  }
  const Acc v = group_sum(lane_sums[0], kGroup);
  const int lane_warp = (threadIdx.x / kGroup);  // thread warp * kLanes + group in the warp
  if (threadIdx.x % kGroup == 0) warp_sums[lane_warp] = v;
  __syncthreads();
  const int warps_per_row = threads_per_row / 32;  // lane warps: a power of two, >= kLanes
  return sum_in_warp_order(warp_sums + (lane_warp & ~(warps_per_row - 1)), warps_per_row);
}

}  // namespace oink::device
