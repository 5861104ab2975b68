// Reductions over a row's threads, for any associative combine. The order of every combine is
// fixed by the thread layout alone, so results are bitwise reproducible and independent of how
// many rows a launch holds (batch invariance), whatever the combine: a floating-point sum is not
// associative, and the fixed order is what makes it deterministic.
//
// A combine is a policy type (Sum and PairSum below; Softmax's Max joins them with Softmax):
//   using Value = ...;                          // a float, a double, or a Pair of either
//   static Value identity();                     // combine(identity(), v) == v
//   static Value combine(Value a, Value b);      // commutative: both orders give the same bits
// The tree needs commutativity in bits: at each butterfly step the two lanes of a pair combine
// their values in opposite argument orders and must agree (IEEE addition is; fmax is not on +0
// and -0, which such a policy must order itself). A row op reduces with one policy (RMSNorm: Sum
// of squares); ops whose second statistic needs the first reduce twice (LayerNorm's forward: the
// sum, then the sum of squared deviations; Softmax: Max, then Sum), each pass with the same
// layout; two independent statistics reduce at once as a Pair (LayerNorm's backward: sum(g) and
// sum(g * xhat)), one barrier instead of two.
#pragma once

#include <type_traits>

#include "device/vec.cuh"

namespace oink::device {

template <typename Acc>
struct Sum {
  using Value = Acc;
  __device__ __forceinline__ static Value identity() { return Value(0); }
  __device__ __forceinline__ static Value combine(Value a, Value b) { return a + b; }
};

// Two statistics that travel together through one reduction. Aligned to its size, so that
// reduce_in_warp_order reads two (or one) of them per 16 bytes.
template <typename A>
struct alignas(2 * sizeof(A)) Pair {
  A a, b;
};

// Each member summed on its own: the same bits as two Sum reductions in the same layout.
template <typename Acc>
struct PairSum {
  using Value = Pair<Acc>;
  __device__ __forceinline__ static Value identity() { return {Acc(0), Acc(0)}; }
  __device__ __forceinline__ static Value combine(Value x, Value y) {
    return {x.a + y.a, x.b + y.b};
  }
};

// A value from lane `lane ^ offset` of the warp (full mask): one shuffle per member.
__device__ __forceinline__ float shfl_xor(float v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ double shfl_xor(double v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
template <typename A>
__device__ __forceinline__ Pair<A> shfl_xor(Pair<A> v, int offset) {
  return {shfl_xor(v.a, offset), shfl_xor(v.b, offset)};
}

// Combine over aligned groups of `width` lanes (a power of two <= 32) by an xor butterfly.
// Result: every lane of the group holds the same bits (commutativity at each step).
// Precondition: all 32 lanes of the warp call it (full-mask shuffles).
template <typename Op>
__device__ __forceinline__ typename Op::Value group_reduce(typename Op::Value v, int width) {
  for (int offset = width >> 1; offset > 0; offset >>= 1) {
    v = Op::combine(v, shfl_xor(v, offset));
  }
  return v;
}

// The values of a row's warps, `first[0 .. warps_per_row)`, combined in warp order: the last
// level of the reduction tree, the same in every schedule. Read 16 bytes at a time where aligned
// (the same combines in the same order).
template <typename Op>
__device__ __forceinline__ typename Op::Value reduce_in_warp_order(const typename Op::Value* first,
                                                                   int warps_per_row) {
  using Value = typename Op::Value;
  constexpr int kPerVector = 16 / sizeof(Value);  // 4 floats, 2 doubles or float pairs, 1 pair
  Value total = Op::identity();
  if (warps_per_row % kPerVector == 0) {  // then `first` is 16-byte aligned too
#pragma unroll 2
    for (int w = 0; w < warps_per_row; w += kPerVector) {
      const Vec<Value, kPerVector> q = *reinterpret_cast<const Vec<Value, kPerVector>*>(first + w);
#pragma unroll
      for (int k = 0; k < kPerVector; ++k) total = Op::combine(total, q.v[k]);
    }
  } else {
    for (int w = 0; w < warps_per_row; ++w) total = Op::combine(total, first[w]);
  }
  return total;
}

// Combine over the `threads_per_row` consecutive threads that share a row (a power of two <=
// 1024). Rows wider than a warp combine their warps' values through `warp_values` (>=
// blockDim.x / 32 of them, 16-byte aligned) in warp order, so every thread of the row returns the
// same bits. The warp index is found with a mask, not a division: this runs once per row on every
// thread, and the generic version cost ~60 instructions a row (SASS, 2026-11-30).
// Precondition: every thread of the block calls it (it may contain a __syncthreads).
//
// `then`: work to start once every thread's value is in (after the barrier; for rows of a warp or
// less, after the shuffles and a __syncwarp), before the last level of the tree. The barrier is
// what keeps it there: ptxas moves loads above any instruction they do not depend on, and issued
// the registers kernel's weight loads ahead of x's, which then waited behind them (Nsight
// Compute, H200).
struct NoWork {
  __device__ void operator()() const {}
};
template <typename Op, typename Then = NoWork>
__device__ __forceinline__ typename Op::Value row_reduce(typename Op::Value v, int threads_per_row,
                                                         typename Op::Value* warp_values,
                                                         Then then = {}) {
  constexpr bool kThen = !std::is_same_v<Then, NoWork>;
  if (threads_per_row <= 32) {
    v = group_reduce<Op>(v, threads_per_row);
    if constexpr (kThen) {
      __syncwarp();
      then();
    }
    return v;
  }
  v = group_reduce<Op>(v, 32);
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) warp_values[warp] = v;
  __syncthreads();
  then();
  const int warps_per_row = threads_per_row / 32;  // a power of two, 2 to 32
  return reduce_in_warp_order<Op>(warp_values + (warp & ~(warps_per_row - 1)), warps_per_row);
}

// row_reduce() for a thread that plays kLanes lanes of the row's layout at once (the tile
// schedule): lane j of this thread is lane `(group base) + j * 32 / kLanes` of its lane warp, so
// the first log2(kLanes) steps of row_reduce()'s butterfly (offsets 16, 8, ...) pair lanes inside
// this thread and are done here, in the same pairs; the remaining steps are the shuffles of a
// 32 / kLanes wide butterfly; each warp of threads holds kLanes lane-warp values (in its lanes
// 0, 32 / kLanes, ...), stored in lane-warp order and combined in warp order as row_reduce()
// does. Same combines, same order, same bits as row_reduce() over threads_per_row threads.
// Preconditions: threads_per_row >= 32 * kLanes (a row's threads fill whole warps); every thread
// of the block calls it (it contains a __syncthreads); `warp_values` holds >= blockDim.x * kLanes
// / 32 values, 16-byte aligned. `then`: as row_reduce()'s, after the barrier.
template <int kLanes, typename Op, typename Then = NoWork>
__device__ __forceinline__ typename Op::Value folded_row_reduce(
    typename Op::Value (&lane_values)[kLanes], int threads_per_row, typename Op::Value* warp_values,
    Then then = {}) {
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "a power of two");
  constexpr int kGroup = 32 / kLanes;  // threads that share one lane warp
#pragma unroll
  for (int half = kLanes / 2; half > 0; half /= 2) {
#pragma unroll
    for (int j = 0; j < half; ++j)
      lane_values[j] = Op::combine(lane_values[j], lane_values[j + half]);
  }
  const typename Op::Value v = group_reduce<Op>(lane_values[0], kGroup);
  const int lane_warp = (threadIdx.x / kGroup);  // thread warp * kLanes + group in the warp
  if (threadIdx.x % kGroup == 0) warp_values[lane_warp] = v;
  __syncthreads();
  then();
  const int warps_per_row = threads_per_row / 32;  // lane warps: a power of two, >= kLanes
  return reduce_in_warp_order<Op>(warp_values + (lane_warp & ~(warps_per_row - 1)), warps_per_row);
}

}  // namespace oink::device
