// Reductions over a row's threads, for any associative combine. The order of every combine is
// fixed by the thread layout alone, so results are bitwise reproducible and independent of how
// many rows a launch holds (batch invariance), whatever the combine: a floating-point sum is not
// associative, and the fixed order is what makes it deterministic.
//
// A combine is a policy type: Sum, PairSum, Max, and the online softmax's OnlineSoftmax and
// OnlineSoftmaxSum (below):
//   using Value = ...;                          // a float, a double, a Pair, or a SoftmaxStat(Sum)
//   static Value identity();                     // combine(identity(), v) == v
//   static Value combine(Value a, Value b);      // commutative: both orders give the same bits
//   static constexpr bool kButterflyAcross;      // optional, false if absent: warps' (and
//                                                // cluster slices') values combine by a butterfly
//                                                // (butterfly_over), not one after another
// The tree needs commutativity in bits: at each butterfly step the two lanes of a pair combine
// their values in opposite argument orders and must agree (IEEE addition is; fmax is not on +0
// and -0, which such a policy must order itself). A row op reduces with one policy (RMSNorm: Sum
// of squares); ops whose second statistic needs the first reduce twice (LayerNorm's forward: the
// sum, then the sum of squared deviations), each pass with the same layout; two independent
// statistics reduce at once as a Pair (LayerNorm's backward: sum(g) and sum(g * xhat)), one
// barrier instead of two; the softmax's max and sum of exponentials, dependent but rescalable,
// reduce at once as the online softmax's (max, sum) pair (OnlineSoftmax), one barrier too.
#pragma once

#include <cmath>
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

// The largest of two values. fmax alone is not commutative in bits on +0 and -0 (either may come
// back): equal values are and-ed bitwise, which gives +0 for the pair and the value otherwise.
template <typename Acc>
struct Max {
  using Value = Acc;
  __device__ __forceinline__ static Value identity() { return -Value(INFINITY); }
  __device__ __forceinline__ static Value combine(Value a, Value b) {
    static_assert(std::is_same_v<Acc, float> || std::is_same_v<Acc, double>, "float or double");
    if constexpr (std::is_same_v<Acc, float>) {
      return a == b ? __int_as_float(__float_as_int(a) & __float_as_int(b)) : fmaxf(a, b);
    } else {
      return a == b ? __longlong_as_double(__double_as_longlong(a) & __double_as_longlong(b))
                    : fmax(a, b);
    }
  }
};

// The online softmax's statistic of some elements z: their max m and the sum s of exp(z - m)
// (identity: m = -inf, s = 0). Float32: the CUDA row ops' math (docs/numerics.md).
struct alignas(8) SoftmaxStat {
  float m, s;
};
// The same with the plain sum of the elements (cross-entropy's label smoothing). Padded to 16
// bytes: reduce_in_warp_order reads Values through a Vec aligned to a power of two.
struct alignas(16) SoftmaxStatSum {
  float m, s, sum;
  float unused;  // 0: the padding, never shuffled
};

// Two (max, sum of exp) statistics as one: (M, s1 exp(m1 - M) + s2 exp(m2 - M)), M = max(m1, m2),
// and the identity where M is -inf (two empty or all -inf sides: exp(-inf - -inf) would be NaN),
// reached without a branch by taking the exponents against 0 there: s1 exp(-inf) + s2 exp(-inf)
// is 0 (and stays NaN where a side's sum is NaN: a NaN input still gives a NaN row).
// One exponential, not two: the side holding M scales by exp(M - M) = 1 exactly, so only the
// other side's is computed (the same bits as both; where M is -inf both sums are 0 or NaN, and
// where M is +inf the larger side's sum is already NaN, exp(inf - inf), either way).
// Every product and sum is rounded on its own (__fmul_rn, __fadd_rn): a contracted FMA would
// round one product and not the other, and the two argument orders would differ in bits.
// expf, not __expf: a few combines per row, and exp(0) = 1 exactly for equal maxima.
// Its combines are the critical path of a row's reduction, each behind an exponential: the warps'
// and the cluster slices' values combine by a butterfly (butterfly_over), not one after another.
struct OnlineSoftmax {
  using Value = SoftmaxStat;
  static constexpr bool kButterflyAcross = true;
  __device__ __forceinline__ static Value identity() { return {-INFINITY, 0.f}; }
  __device__ __forceinline__ static Value combine(Value x, Value y) {
    const float m = Max<float>::combine(x.m, y.m);
    const float base = m == -INFINITY ? 0.f : m;
    const bool x_below = x.m < y.m;
    const float scale = expf((x_below ? x.m : y.m) - base);  // the smaller side's
    const float sx = x_below ? __fmul_rn(x.s, scale) : x.s;
    const float sy = x_below ? y.s : __fmul_rn(y.s, scale);
    return {m, __fadd_rn(sx, sy)};
  }
};

// OnlineSoftmax with the plain sums added alongside (whatever the maxima).
struct OnlineSoftmaxSum {
  using Value = SoftmaxStatSum;
  static constexpr bool kButterflyAcross = true;
  __device__ __forceinline__ static Value identity() { return {-INFINITY, 0.f, 0.f, 0.f}; }
  __device__ __forceinline__ static Value combine(Value x, Value y) {
    const SoftmaxStat ms = OnlineSoftmax::combine({x.m, x.s}, {y.m, y.s});
    return {ms.m, ms.s, __fadd_rn(x.sum, y.sum), 0.f};
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
__device__ __forceinline__ SoftmaxStat shfl_xor(SoftmaxStat v, int offset) {
  return {shfl_xor(v.m, offset), shfl_xor(v.s, offset)};
}
__device__ __forceinline__ SoftmaxStatSum shfl_xor(SoftmaxStatSum v, int offset) {
  return {shfl_xor(v.m, offset), shfl_xor(v.s, offset), shfl_xor(v.sum, offset), 0.f};
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
// level of the reduction tree (of every policy without kButterflyAcross), the same in every
// schedule. Read 16 bytes at a time where aligned (the same combines in the same order).
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

template <typename Op, typename = void>
struct ButterflyAcross : std::false_type {};
template <typename Op>
struct ButterflyAcross<Op, std::void_t<decltype(Op::kButterflyAcross)>>
    : std::bool_constant<Op::kButterflyAcross> {};

// `count` values (1 to 32) combined by an xor butterfly, the same bits in every lane: lane l of
// every warp starts from value l % width (width: count rounded up to a power of two; the identity
// past count, and combine(v, identity()) is v in bits for such a policy), so each aligned group
// of width lanes holds the same values in the same places. log2(width) dependent combines where
// one after another would be count. Precondition: all 32 lanes of the warp call it.
template <typename Op>
__device__ __forceinline__ typename Op::Value butterfly_over(const typename Op::Value* values,
                                                             int count) {
  const int width = count <= 1 ? 1 : 1 << (32 - __clz(count - 1));
  const int j = static_cast<int>(threadIdx.x % 32) & (width - 1);
  return group_reduce<Op>(j < count ? values[j] : Op::identity(), width);
}

// The values of a row's warps combined: in warp order (reduce_in_warp_order), or by a butterfly
// for a policy with kButterflyAcross (the online softmax: at 16 warps, 4 dependent combines
// instead of 16, each behind an exponential). Either way the order is fixed by the layout.
// Precondition: all 32 lanes of the warp call it.
template <typename Op>
__device__ __forceinline__ typename Op::Value combine_warp_values(const typename Op::Value* first,
                                                                  int warps_per_row) {
  if constexpr (ButterflyAcross<Op>::value) {
    return butterfly_over<Op>(first, warps_per_row);
  } else {
    return reduce_in_warp_order<Op>(first, warps_per_row);
  }
}

// Combine over the `threads_per_row` consecutive threads that share a row (a power of two <=
// 1024). Rows wider than a warp combine their warps' values through `warp_values` (>=
// blockDim.x / 32 of them, 16-byte aligned) in a fixed order (combine_warp_values), so every
// thread of the row returns the same bits. The warp index is found with a mask, not a division:
// this runs once per row on every thread, and the generic version cost ~60 instructions a row
// (SASS, 2026-11-30). Precondition: every thread of the block calls it (it may contain a
// __syncthreads).
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
  return combine_warp_values<Op>(warp_values + (warp & ~(warps_per_row - 1)), warps_per_row);
}

// row_reduce() for a thread that plays kLanes lanes of the row's layout at once (the tile
// schedule): lane j of this thread is lane `(group base) + j * 32 / kLanes` of its lane warp, so
// the first log2(kLanes) steps of row_reduce()'s butterfly (offsets 16, 8, ...) pair lanes inside
// this thread and are done here, in the same pairs; the remaining steps are the shuffles of a
// 32 / kLanes wide butterfly; each warp of threads holds kLanes lane-warp values (in its lanes
// 0, 32 / kLanes, ...), stored in lane-warp order and combined as row_reduce() combines them. Same
// combines, same order, same bits as row_reduce() over threads_per_row threads. Preconditions:
// threads_per_row >= 32 * kLanes (a row's threads fill whole warps); every thread of the block
// calls it (it contains a __syncthreads); `warp_values` holds >= blockDim.x * kLanes / 32 values,
// 16-byte aligned. `then`: as row_reduce()'s, after the barrier.
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
  return combine_warp_values<Op>(warp_values + (lane_warp & ~(warps_per_row - 1)), warps_per_row);
}

}  // namespace oink::device
