// The row types of softmax and softmax_backward (core/row_reduce.h) for the schedules of
// kernels/row_reduce.cuh, and the online-softmax folds cross-entropy shares
// (kernels/cross_entropy_row.cuh). Math per the family's semantics: float32 throughout.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/row_reduce.h"
#include "device/reduce.cuh"
#include "kernels/row_reduce.cuh"

namespace oink {

// exp of a row element's offset from the max: expf for float32 rows; __expf for 16-bit rows,
// whose outputs round to 8 or 11 bits (the semantics allow it). Both give exp(0) = 1 exactly.
template <typename T>
__device__ __forceinline__ float row_exp(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return expf(x);
  } else {
    return __expf(x);
  }
}

// Value is device::SoftmaxStat or device::SoftmaxStatSum (which adds the plain sum).
template <typename Value>
inline constexpr bool kHasSum = std::is_same_v<Value, device::SoftmaxStatSum>;

template <typename Value>
__device__ __forceinline__ Value softmax_stat(float m, float s, float sum) {
  if constexpr (kHasSum<Value>) {
    return {m, s, sum, 0.f};
  } else {
    return {m, s};
  }
}

// The max an exponent is taken against: m, or 0 where m is -inf (no elements, or all -inf), so
// that exp(z - 0) of each -inf is 0 and the sum is 0, as the identity's, without a branch (and a
// NaN element, which fmaxf skips, still makes the sum NaN).
__device__ __forceinline__ float exp_base(float m) { return m == -INFINITY ? 0.f : m; }

// A registers thread's statistic over its elements z (each_z(g) calls g(z) for each, in
// increasing order): m = their max, then s = the sum of exp(z - m) in increasing order, and the
// plain sum of the z in increasing order.
template <typename T, typename Value, typename EachZ>
__device__ __forceinline__ Value thread_softmax_stat(EachZ&& each_z) {
  float m = -INFINITY, sum = 0.f;
  each_z([&](float z) {
    m = fmaxf(m, z);
    if constexpr (kHasSum<Value>) sum = __fadd_rn(sum, z);
  });
  const float base = exp_base(m);
  float s = 0.f;
  each_z([&](float z) { s = __fadd_rn(s, row_exp<T>(z - base)); });
  return softmax_stat<Value>(m, s, sum);
}

// A looped thread's statistic with one more chunk's elements z folded in online: the sum so far
// is rescaled to the new max once (exp(0) = 1 where the max stays; 0 * 0 from the identity),
// then the chunk's exp(z - max) are added in increasing order.
template <typename T, typename Value, typename EachZ>
__device__ __forceinline__ Value add_softmax_chunk(Value v, EachZ&& each_z) {
  float chunk_max = -INFINITY, sum = 0.f;
  if constexpr (kHasSum<Value>) sum = v.sum;
  each_z([&](float z) {
    chunk_max = fmaxf(chunk_max, z);
    if constexpr (kHasSum<Value>) sum = __fadd_rn(sum, z);
  });
  const float m = fmaxf(v.m, chunk_max);
  const float base = exp_base(m);
  float s = __fmul_rn(v.s, row_exp<T>(v.m - base));
  each_z([&](float z) { s = __fadd_rn(s, row_exp<T>(z - base)); });
  return softmax_stat<Value>(m, s, sum);
}

// softmax: in = x, out = y = exp(x - m) / s.
template <typename T, bool kVector>
struct SoftmaxRow {
  static constexpr ReduceOp kOp = ReduceOp::kSoftmax;
  static constexpr int kStreams = 1;
  static constexpr bool kReduces = true;
  static constexpr bool kWrites = true;
  static constexpr bool kReadsAcross = false;
  using Io = ChunkIo<T, kVector>;
  using Floats = typename Io::Floats;
  using Policy = device::OnlineSoftmax;
  using Value = typename Policy::Value;
  struct Stats {
    float m, s;
    float inv_s;  // 16-bit rows multiply by 1 / s (see store)
  };

  const T* in[kStreams];
  T* out;
  int64_t n;

  // Rows past the last one point at row 0 and are never touched (the schedules check `active`).
  __device__ SoftmaxRow(const ReduceParams& p, int64_t row, bool active) : n(p.cols) {
    const ReduceRowOffsets at = reduce_row_offsets(p, active ? row : 0);
    in[0] = static_cast<const T*>(p.in) + at.in;
    out = static_cast<T*>(p.out) + at.out;
  }
  __device__ void after_loads(bool) const {}

  template <typename Chunks>
  __device__ Value thread_value(Chunks&& chunks) const {
    return thread_softmax_stat<T, Value>([&](auto&& g) {
      chunks([&](const Floats* xs, int64_t col) {
#pragma unroll
        for (int e = 0; e < Io::kElems; ++e) {
          if (Io::valid(col, e, n)) g(xs[0].v[e]);
        }
      });
    });
  }
  __device__ Value add_chunk(Value v, const Floats* xs, int64_t col) const {
    return add_softmax_chunk<T, Value>(v, [&](auto&& g) {
#pragma unroll
      for (int e = 0; e < Io::kElems; ++e) {
        if (Io::valid(col, e, n)) g(xs[0].v[e]);
      }
    });
  }
  // An all -inf row: (m, s) = (-inf, 0), and every y is exp(NaN) / 0 = NaN (as torch.softmax).
  __device__ Stats finish(Value total) const { return {total.m, total.s, 1.f / total.s}; }
  __device__ void save(const ReduceParams&, int64_t, const Stats&, bool) const {}

  // float32 rows divide (IEEE), as the semantics write it; 16-bit rows multiply by 1 / s, one
  // float32 rounding more, far below their own.
  __device__ void store(const Floats* xs, int64_t col, const Stats& st) const {
    Floats y;
#pragma unroll
    for (int e = 0; e < Io::kElems; ++e) {
      const float ex = row_exp<T>(xs[0].v[e] - st.m);
      if constexpr (std::is_same_v<T, float>) {
        y.v[e] = __fdiv_rn(ex, st.s);
      } else {
        y.v[e] = __fmul_rn(ex, st.inv_s);
      }
    }
    Io::store(out, col, n, y);
  }
};

// softmax_backward: in = dy, in2 = y, out = dx = y * (dy - dot), dot = sum(dy * y).
template <typename T, bool kVector>
struct SoftmaxBackwardRow {
  static constexpr ReduceOp kOp = ReduceOp::kSoftmaxBackward;
  static constexpr int kStreams = 2;
  static constexpr bool kReduces = true;
  static constexpr bool kWrites = true;
  static constexpr bool kReadsAcross = false;
  using Io = ChunkIo<T, kVector>;
  using Floats = typename Io::Floats;
  using Policy = device::Sum<float>;
  using Value = typename Policy::Value;
  struct Stats {
    float dot;
  };

  const T* in[kStreams];  // dy, y
  T* out;
  int64_t n;

  __device__ SoftmaxBackwardRow(const ReduceParams& p, int64_t row, bool active) : n(p.cols) {
    const ReduceRowOffsets at = reduce_row_offsets(p, active ? row : 0);
    in[0] = static_cast<const T*>(p.in) + at.in;
    in[1] = static_cast<const T*>(p.in2) + at.in2;
    out = static_cast<T*>(p.out) + at.out;
  }
  __device__ void after_loads(bool) const {}

  // dy * y added in increasing order, each step one FMA (written out: the same in every
  // instantiation, whatever the compiler would contract).
  __device__ Value add_chunk(Value acc, const Floats* xs, int64_t col) const {
#pragma unroll
    for (int e = 0; e < Io::kElems; ++e) {
      if (Io::valid(col, e, n)) acc = __fmaf_rn(xs[0].v[e], xs[1].v[e], acc);
    }
    return acc;
  }
  template <typename Chunks>
  __device__ Value thread_value(Chunks&& chunks) const {
    Value acc = 0.f;
    chunks([&](const Floats* xs, int64_t col) { acc = add_chunk(acc, xs, col); });
    return acc;
  }
  __device__ Stats finish(Value total) const { return {total}; }
  __device__ void save(const ReduceParams&, int64_t, const Stats&, bool) const {}

  __device__ void store(const Floats* xs, int64_t col, const Stats& st) const {
    Floats dx;
#pragma unroll
    for (int e = 0; e < Io::kElems; ++e) {
      dx.v[e] = __fmul_rn(xs[1].v[e], __fsub_rn(xs[0].v[e], st.dot));
    }
    Io::store(out, col, n, dx);
  }
};

}  // namespace oink
