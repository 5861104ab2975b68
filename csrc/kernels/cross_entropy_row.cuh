// The row types of cross_entropy, cross_entropy_backward and scale_gradient_ (core/row_reduce.h)
// for the schedules of kernels/row_reduce.cuh. The options are template arguments
// (kernels/row_reduce.cu picks the instantiation from ReduceProblem's bools): an option that is off
// costs nothing. Math per the family's semantics, float32 throughout:
//   z = softcap ? c * tanh(x / c) : x;  lse = max(z) + log(sum exp(z - max(z)));
//   loss = lse - (1 - eps) z_t - (eps / V) sum(z);
//   g = (exp(z - lse) - (1 - eps) [j == t] - eps / V) * scale * (softcap ? 1 - tanh(x / c)^2 : 1);
// ignored rows (t == ignore_index): loss 0 and g 0; targets out of [0, V): loss and g NaN.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/row_reduce.h"
#include "device/reduce.cuh"
#include "kernels/row_reduce.cuh"
#include "kernels/softmax_row.cuh"

namespace oink {

enum class TargetKind : uint8_t { kClass, kIgnored, kOutOfRange };

// What the forward and the backward share: the row's target and the element math, for rows of T.
template <typename T, bool kSmoothing, bool kSoftcap>
struct CrossEntropyMath {
  int64_t target;
  TargetKind kind;
  float keep, spread;  // 1 - eps and eps / V (label smoothing only)
  float cap, inv_cap;  // softcap only

  // target[row] is read once, here; rows past the last one read nothing (and write nothing).
  __device__ CrossEntropyMath(const ReduceParams& p, int64_t row, bool active)
      : target(active ? p.target[row] : p.ignore_index),
        kind(target == p.ignore_index         ? TargetKind::kIgnored
             : target < 0 || target >= p.cols ? TargetKind::kOutOfRange
                                              : TargetKind::kClass),
        keep(kSmoothing ? p.keep : 1.f),
        spread(kSmoothing ? p.spread : 0.f),
        cap(p.softcap),
        inv_cap(p.inv_softcap) {}

  // z of a logit, and dz/dx = 1 - tanh^2 (from tanh itself: (z / c)^2 would round z first).
  struct Z {
    float z, dz;
  };
  __device__ __forceinline__ Z z_of(float x) const {
    if constexpr (kSoftcap) {
      const float t = tanhf(__fmul_rn(x, inv_cap));
      return {__fmul_rn(cap, t), __fsub_rn(1.f, __fmul_rn(t, t))};
    } else {
      return {x, 1.f};
    }
  }

  // The row's loss from its lse, z_t and sum(z) (z_t and sum(z) are read for class rows only).
  __device__ __forceinline__ float loss(float lse, float z_target, float z_sum) const {
    if (kind == TargetKind::kIgnored) return 0.f;
    if (kind == TargetKind::kOutOfRange) return NAN;
    if constexpr (kSmoothing) {
      return __fsub_rn(__fsub_rn(lse, __fmul_rn(keep, z_target)), __fmul_rn(spread, z_sum));
    } else {
      return __fsub_rn(lse, z_target);
    }
  }

  // One chunk of the gradient row, the logits xs at columns col, col + 1, ...: every element of
  // an ignored row is 0, of an out-of-range row NaN, whatever the logits.
  template <typename Floats>
  __device__ __forceinline__ Floats grad(const Floats& xs, int64_t col, float lse,
                                         float scale) const {
    constexpr int kElems = sizeof(Floats) / sizeof(float);
    const float fill = kind == TargetKind::kIgnored ? 0.f : NAN;
    const int64_t target_at = target - col;  // the target's element in this chunk, if any
    Floats g;
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const Z z = z_of(xs.v[e]);
      float d = row_exp<T>(z.z - lse);
      if (target_at == e) d = __fsub_rn(d, keep);
      if constexpr (kSmoothing) d = __fsub_rn(d, spread);
      d = __fmul_rn(d, scale);
      if constexpr (kSoftcap) d = __fmul_rn(d, z.dz);
      g.v[e] = kind == TargetKind::kClass ? d : fill;
    }
    return g;
  }
};

// cross_entropy: in = logits [M, V]; per row loss[r] and lse[r] and, with kWritesRows, out = the
// gradient row for the scale *grad_scale (in place when out == in). With kSmoothing the statistic
// carries sum(z) as a third member (device::OnlineSoftmaxSum).
template <typename T, bool kVector, bool kWritesRows, bool kSmoothing, bool kSoftcap>
struct CrossEntropyRow {
  static constexpr ReduceOp kOp = ReduceOp::kCrossEntropy;
  static constexpr int kStreams = 1;
  static constexpr bool kReduces = true;
  static constexpr bool kWrites = kWritesRows;
  // The row's lane 0 reads logits[r, t], which another thread of the row overwrites in place.
  static constexpr bool kReadsAcross = kWritesRows;
  using Io = ChunkIo<T, kVector>;
  using Floats = typename Io::Floats;
  using Policy = std::conditional_t<kSmoothing, device::OnlineSoftmaxSum, device::OnlineSoftmax>;
  using Value = typename Policy::Value;
  using Math = CrossEntropyMath<T, kSmoothing, kSoftcap>;
  struct Stats {
    float lse, z_sum;
  };

  const T* in[kStreams];
  T* out;
  int64_t n;
  Math math;
  float scale = 0.f;     // *grad_scale, or 1 without one (kWritesRows)
  float z_target = 0.f;  // z of logits[r, t]: the row's lane 0, class rows only

  __device__ CrossEntropyRow(const ReduceParams& p, int64_t r, bool active)
      : n(p.cols), math(p, r, active) {
    const ReduceRowOffsets at = reduce_row_offsets(p, active ? r : 0);
    in[0] = static_cast<const T*>(p.in) + at.in;
    out = static_cast<T*>(p.out) + at.out;
    if constexpr (kWritesRows) scale = grad_scale_of<T>(p);
  }

  // After the row's loads (its address waits for target[r]): one element, never out of range.
  __device__ void after_loads(bool leader) {
    if (leader && math.kind == TargetKind::kClass) {
      z_target = math.z_of(device::to_float(in[0][math.target])).z;
    }
  }

  // Each valid element's z, in increasing order, of one chunk.
  template <typename G>
  __device__ __forceinline__ void each_z(const Floats* xs, int64_t col, G&& g) const {
#pragma unroll
    for (int e = 0; e < Io::kElems; ++e) {
      if (Io::valid(col, e, n)) g(math.z_of(xs[0].v[e]).z);
    }
  }
  template <typename Chunks>
  __device__ Value thread_value(Chunks&& chunks) const {
    return thread_softmax_stat<T, Value>(
        [&](auto&& g) { chunks([&](const Floats* xs, int64_t col) { each_z(xs, col, g); }); });
  }
  __device__ Value add_chunk(Value v, const Floats* xs, int64_t col) const {
    return add_softmax_chunk<T, Value>(v, [&](auto&& g) { each_z(xs, col, g); });
  }

  // lse = m + log(s): -inf for an all -inf row, NaN where s is (a NaN logit).
  __device__ Stats finish(Value total) const {
    float z_sum = 0.f;
    if constexpr (kSmoothing) z_sum = total.sum;
    return {__fadd_rn(total.m, logf(total.s)), z_sum};
  }
  // The per-row outputs' pointers come from the parameters here, not from row members: held
  // through the row, they cost registers (the element-wise float16 kernels of 4 chunks spilled).
  __device__ void save(const ReduceParams& p, int64_t row, const Stats& st, bool leader) const {
    if (leader) {
      p.lse[row] = st.lse;
      p.loss[row] = math.loss(st.lse, z_target, st.z_sum);
    }
  }
  __device__ void store(const Floats* xs, int64_t col, const Stats& st) const {
    Io::store(out, col, n, math.grad(xs[0], col, st.lse, scale));
  }
};

// cross_entropy_backward: in = logits, out = dlogits (may be in); no reduction: lse[r] is the
// forward's and the scale is dloss[r], both read once per row with target[r].
template <typename T, bool kVector, bool kSmoothing, bool kSoftcap>
struct CrossEntropyBackwardRow {
  static constexpr ReduceOp kOp = ReduceOp::kCrossEntropyBackward;
  static constexpr int kStreams = 1;
  static constexpr bool kReduces = false;
  static constexpr bool kWrites = true;
  static constexpr bool kReadsAcross = false;
  using Io = ChunkIo<T, kVector>;
  using Floats = typename Io::Floats;
  using Math = CrossEntropyMath<T, kSmoothing, kSoftcap>;
  struct Stats {
    float lse, scale;
  };

  const T* in[kStreams];
  T* out;
  int64_t n;
  Math math;
  Stats stats;

  __device__ CrossEntropyBackwardRow(const ReduceParams& p, int64_t r, bool active)
      : n(p.cols), math(p, r, active), stats{active ? p.lse[r] : 0.f, active ? p.dloss[r] : 0.f} {
    const ReduceRowOffsets at = reduce_row_offsets(p, active ? r : 0);
    in[0] = static_cast<const T*>(p.in) + at.in;
    out = static_cast<T*>(p.out) + at.out;
  }
  __device__ void after_loads(bool) const {}
  __device__ Stats finish() const { return stats; }
  __device__ void save(const ReduceParams&, int64_t, const Stats&, bool) const {}
  __device__ void store(const Floats* xs, int64_t col, const Stats& st) const {
    Io::store(out, col, n, math.grad(xs[0], col, st.lse, st.scale));
  }
};

// scale_gradient_: in = out = the fused gradient g (cross_entropy's kWritesRows), g *= s for the
// scalar s = *grad_scale (float32 or g's dtype), the upstream gradient that backward only then
// knows. Where s == 1 (a
// plain loss.backward()) every CTA returns before its loads: one launch and no pass over g, with
// no host sync to find out. Rounding: g, rounded once in the forward, is rounded again here
// where s != 1.
template <typename T, bool kVector>
struct ScaleGradientRow {
  static constexpr ReduceOp kOp = ReduceOp::kScaleGradient;
  static constexpr int kStreams = 1;
  static constexpr bool kReduces = false;
  static constexpr bool kWrites = true;
  static constexpr bool kReadsAcross = false;
  static constexpr bool kMayIdle = true;
  using Io = ChunkIo<T, kVector>;
  using Floats = typename Io::Floats;
  struct Stats {
    float s;
  };

  const T* in[kStreams];
  T* out;
  int64_t n;
  float s;

  __device__ ScaleGradientRow(const ReduceParams& p, int64_t r, bool active)
      : n(p.cols), s(grad_scale_of<T>(p)) {
    const ReduceRowOffsets at = reduce_row_offsets(p, active ? r : 0);
    in[0] = static_cast<const T*>(p.in) + at.in;
    out = static_cast<T*>(p.out) + at.out;
  }
  // The same for every thread of the grid (one scalar): the whole CTA returns or none of it.
  __device__ bool idle() const { return s == 1.f; }
  __device__ void after_loads(bool) const {}
  __device__ Stats finish() const { return {s}; }
  __device__ void save(const ReduceParams&, int64_t, const Stats&, bool) const {}
  __device__ void store(const Floats* xs, int64_t col, const Stats& st) const {
    Floats g;
#pragma unroll
    for (int e = 0; e < Io::kElems; ++e) g.v[e] = __fmul_rn(xs[0].v[e], st.s);
    Io::store(out, col, n, g);
  }
};

}  // namespace oink
