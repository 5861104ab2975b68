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

// The accumulation type of a row of T. float32 rows sum, scale and multiply in float64 with one
// rounding at the end: with float32 math throughout, float32 outputs were 1-1.5 ulp worse than
// F.rms_norm's on the H200 (docs/contract.md, 'How correctness is measured', allows one ulp).
// 16-bit outputs keep float32: their final rounding (2^-9 or 2^-12) dwarfs float32 error, and they
// were within bounds in every sweep case. (The forward and backward kernels of every row op.)
template <typename T>
using RowAcc = std::conditional_t<std::is_same_v<T, float>, double, float>;

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

// The words a Vec moves in: 16 bytes, or one 8-byte word for an 8-byte Vec (the 16-bit weight of
// a float32 row's 4-element chunk). A 32-byte Vec<float, 8> is two 128-bit accesses.
template <typename V>
using Word = std::conditional_t<(sizeof(V) >= 16), uint4, uint2>;
template <typename V>
inline constexpr int kWords = sizeof(V) / sizeof(Word<V>);

// Whole-vector load/store. Precondition: `p` is aligned to sizeof(Vec<T, kN>).
template <typename T, int kN>
__device__ __forceinline__ Vec<T, kN> load_vec(const T* p) {
  using V = Vec<T, kN>;
  static_assert(sizeof(V) % sizeof(Word<V>) == 0, "vector I/O moves whole words");
  union {
    Word<V> words[kWords<V>];
    V vec;
  } u;
  const Word<V>* src = reinterpret_cast<const Word<V>*>(p);
#pragma unroll
  for (int i = 0; i < kWords<V>; ++i) u.words[i] = src[i];
  return u.vec;
}

template <typename T, int kN>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, kN>& vec) {
  using V = Vec<T, kN>;
  union {
    Word<V> words[kWords<V>];
    V vec;
  } u;
  u.vec = vec;
  Word<V>* dst = reinterpret_cast<Word<V>*>(p);
#pragma unroll
  for (int i = 0; i < kWords<V>; ++i) dst[i] = u.words[i];
}

// A Vec's bytes as the words a vector load lands in. Kernels that issue several loads before
// using any hold them like this: a Vec of 16-bit elements takes one register per element, and
// the compiler split each loaded chunk into them before it issued the next load, which made the
// loads of a row dependent round trips (SASS of the registers kernel).
template <typename V>
struct Raw {
  Word<V> pieces[kWords<V>];
};

template <typename V>
__device__ __forceinline__ Raw<V> load_raw(const void* p) {
  Raw<V> r;
  const Word<V>* src = static_cast<const Word<V>*>(p);
#pragma unroll
  for (int i = 0; i < kWords<V>; ++i) r.pieces[i] = src[i];
  return r;
}

// load_raw() where `pred` holds; the words are unspecified where it does not (the caller never
// reads them). One predicated PTX load, not a load inside `if (pred)`: such a load is a basic
// block of its own, and the compiler split a loaded 16-bit chunk into halves inside that block,
// which stalls on the load right there; ptxas then moved the loads of later blocks below the
// stall. SASS of the fused op's bf16 decode kernel (sm_90a): x, then the weight, a stall on the
// weight, and only then the residual: two memory round trips a row instead of one. Volatile, so
// that the loads keep their order and place ahead of every use.
template <typename V>
__device__ __forceinline__ Raw<V> load_raw_if(bool pred, const void* p) {
  static_assert(kWords<V> == 1, "one vector access");
  Raw<V> r;
  if constexpr (sizeof(V) == 16) {
    uint4& w = r.pieces[0];
    asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t"
        "@p ld.global.v4.u32 {%0, %1, %2, %3}, [%5];\n\t}"
        : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w)
        : "r"(static_cast<int>(pred)), "l"(p));
  } else {
    static_assert(sizeof(V) == 8, "16- or 8-byte chunks");
    uint2& w = r.pieces[0];
    asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %2, 0;\n\t"
        "@p ld.global.v2.u32 {%0, %1}, [%3];\n\t}"
        : "=r"(w.x), "=r"(w.y)
        : "r"(static_cast<int>(pred)), "l"(p));
  }
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

// The same bytes as another type of the same size (a 16-byte chunk <-> a shared-memory slot).
template <typename To, typename From>
__device__ __forceinline__ To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast keeps the size");
  union {
    From from;
    To to;
  } u;
  u.from = from;
  return u.to;
}

// A chunk's elements in float32, exactly (every 16-bit value is a float32 value). bfloat16 pairs
// convert by the 32-bit word they share: the low element is the word shifted up by 16, the high
// one the word with its low half cleared, one instruction each. Element by element, the compiler
// first moved the high half down (PRMT) and then shifted it back up: a third more instructions
// in the tile and cluster kernels' loops over their 64 elements a thread (SASS, sm_90a).
// (LayerNorm rows still convert element by element: with to_floats, ptxas held the float32
// LayerNorm registers kernel to 32 registers and spilled 8 bytes on sm_80 and sm_90a.)
template <typename T, int kN>
__device__ __forceinline__ Vec<float, kN> to_floats(const Vec<T, kN>& v) {
  Vec<float, kN> f;
  if constexpr (std::is_same_v<T, __nv_bfloat16> && kN % 2 == 0) {
    struct Words {
      uint32_t w[kN / 2];
    };
    const Words words = bit_cast<Words>(v);
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      f.v[2 * i] = __uint_as_float(words.w[i] << 16);
      f.v[2 * i + 1] = __uint_as_float(words.w[i] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int e = 0; e < kN; ++e) f.v[e] = to_float(v.v[e]);
  }
  return f;
}

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
