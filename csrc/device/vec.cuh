// Vector I/O and float conversion: the only place that reinterprets memory as vector types.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace oink::device {

// kN elements of T, aligned to their total size so one chunk moves as whole 16-byte accesses.
template <typename T, int kN>
struct alignas(sizeof(T) * kN) Vec {
  using Element = T;
  T v[kN];
};

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Whole-vector load/store as 16-byte pieces (a 32-byte Vec<float, 8> is two 128-bit accesses).
// Precondition: `p` is aligned to sizeof(Vec<T, kN>), which is a multiple of 16.
template <typename T, int kN>
__device__ __forceinline__ Vec<T, kN> load_vec(const T* p) {
  static_assert(sizeof(Vec<T, kN>) % 16 == 0, "vector I/O moves whole 16-byte pieces");
  constexpr int kPieces = sizeof(Vec<T, kN>) / 16;
  union {
    uint4 pieces[kPieces];
    Vec<T, kN> vec;
  } u;
  const uint4* src = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < kPieces; ++i) u.pieces[i] = src[i];
  return u.vec;
}

template <typename T, int kN>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, kN>& vec) {
  constexpr int kPieces = sizeof(Vec<T, kN>) / 16;
  union {
    uint4 pieces[kPieces];
    Vec<T, kN> vec;
  } u;
  u.vec = vec;
  uint4* dst = reinterpret_cast<uint4*>(p);
#pragma unroll
  for (int i = 0; i < kPieces; ++i) dst[i] = u.pieces[i];
}

// A Vec's bytes as 16-byte words, the form a vector load lands in. Kernels that issue several
// loads before using any hold them like this: a Vec of 16-bit elements takes one register per
// element, and the compiler split each loaded chunk into them before it issued the next load,
// which made the loads of a row dependent round trips (SASS, 2026-11-30).
template <typename V>
struct Raw {
  uint4 pieces[sizeof(V) / 16];
};

template <typename V>
__device__ __forceinline__ Raw<V> load_raw(const void* p) {
  Raw<V> r;
  const uint4* src = static_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(V) / 16); ++i) r.pieces[i] = src[i];
  return r;
}

template <typename V>
__device__ __forceinline__ V unpack(const Raw<V>& r) {
  union {
    Raw<V> raw;
    V vec;
  } u;
  u.raw = r;
  return u.vec;
}

// Whether a kernel should hold a loaded V as Raw words: whole vectors of 16-bit elements. 32-bit
// elements already take a register each, and element-wise chunks are loaded element by element.
template <bool kVector, typename V>
inline constexpr bool kHoldsRaw = kVector && sizeof(typename V::Element) == 2;

// One chunk of kN elements starting at column `col` of a row of `n` columns.
// kVector: the whole chunk is in bounds and aligned (the plan guarantees it), one vector access.
// Otherwise: element by element, columns >= n read as zero and are never written.
template <bool kVector, typename T, int kN>
__device__ __forceinline__ Vec<T, kN> load_chunk(const T* row, int64_t col, int64_t n) {
  if constexpr (kVector) {
    return load_vec<T, kN>(row + col);
  } else {
    Vec<T, kN> out;
#pragma unroll
    for (int i = 0; i < kN; ++i) out.v[i] = col + i < n ? row[col + i] : from_float<T>(0.f);
    return out;
  }
}

template <bool kVector, typename T, int kN>
__device__ __forceinline__ void store_chunk(T* row, int64_t col, int64_t n, const Vec<T, kN>& v) {
  if constexpr (kVector) {
    store_vec<T, kN>(row + col, v);
  } else {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      if (col + i < n) row[col + i] = v.v[i];
    }
  }
}

}  // namespace oink::device
