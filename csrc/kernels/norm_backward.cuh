// The backward passes of RMSNorm and LayerNorm on CUDA (the plan: core/backward_plan.h). With
// g = dy * w:
//
//   RMSNorm    y = x * r * w, r = rstd = 1 / sqrt(mean(x^2) + eps):
//              dx = r * g - c * x,  c = r^3 * sum(g * x) / N;   dweight = sum over rows of dy*x*r.
//   LayerNorm  y = xhat * w + b, xhat = (x - mean) * r, r = 1 / sqrt(var + eps):
//              dx = r * (g - sum(g) / N - xhat * sum(g * xhat) / N);
//              dweight = sum over rows of dy * xhat, dbias = sum over rows of dy.
//
// What differs is a gradient policy (RmsNormGrad, LayerNormGrad below: the row's saved
// statistics, its sums, dx and the parameter gradients' terms); the kernel is the same.
//
// norm_backward_kernel: one CTA per weight-gradient block (core/backward_plan.h), walking the
// block's rows in order, a whole row at a time on backward_threads_per_row(N, dtype) lanes (the
// forward's, at most 512: chunk c on lane c % lanes, each lane's 1, 2 or 4 chunks in increasing
// order, then device::row_reduce's fixed tree), so a row's dx depends on its values, N and the
// dtypes only (batch invariance). Each thread owns the same columns in every row: their dweight
// (and dbias) partial sums grow in registers, in row order, written once as the block's partial
// row (and,
// at 1 or 2 chunks, their weight waits in registers for the whole block). At 1 or 2 chunks with
// vector I/O the loads of the next row are issued before the current row's reduction: its
// barrier would otherwise leave the SM without loads in flight.
//
// Rows longer than one slice (kCluster): a thread block cluster per block, one CTA per slice, each
// the kernel above over its slice's columns (512 lanes of 4 chunks). Every CTA of the cluster
// walks the same rows; a row's slice sums are sent into every CTA's shared memory, one cluster
// barrier a row makes them visible, and each CTA adds them in slice order (so the row's sums,
// hence dx, have the same bits in every CTA and depend on N, not on the batch). A CTA copies its
// slice of the next row (x and dy, cp.async) into shared memory while it works on the current
// one (kBackwardClusterSmemBytes: two rows): without it no load was in flight across the row's
// reduction and cluster barrier. Two buffers of slice sums, alternate rows: a CTA can be at most
// one row ahead of another, since it cannot pass row i + 1's barrier before every CTA has arrived
// there, after reading row i's sums. The cluster barrier arrived on at the start and waited for
// before the first send is what tells that every CTA has started; none exits before the last
// row's barrier, after every send into it.
//
// weight_grad_reduce_kernel: dweight[j] = the blocks' partials of column j added in block order,
// rounded once to the weight's dtype. No atomics: the same bits on every run. Its loads run ahead
// of its adds (kWeightGradReduceLoadsInFlight), never its order.
//
// Arithmetic in float32 for 16-bit rows, float64 for float32 rows (as the forward, NormRow::Acc),
// each output rounded once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/backward_plan.h"
#include "core/plan.h"
#include "core/rows.h"
#include "device/async.cuh"
#include "device/reduce.cuh"
#include "device/vec.cuh"

namespace oink {

struct BackwardParams {
  const void* dy;      // [M, N] rows (strides below)
  const void* x;       // [M, N] rows
  const void* weight;  // [N] contiguous, or nullptr
  const float* rstd;   // [M], logical row order
  void* dx;            // [M, N] rows
  void* partials;      // [blocks][N] of Acc, or nullptr without a weight
  int64_t rows, cols, chunks_per_row, block_rows;
  int threads_per_row;
  float inv_cols;     // 1/N, rounded once on the host
  double inv_cols_d;  // 1/N in float64, for float32 rows
  RowIndexer row_index;
  RowStrides x_strides, dy_strides, dx_strides;
  // LayerNorm only (after the fields RMSNorm reads, so that none of those moves):
  const float* mean;    // [M], logical row order
  void* bias_partials;  // [blocks][N] of Acc, or nullptr without a bias
  // The looped plan's [M] row sums (GradOf<Acc>::Combine::Value), logical row order.
  void* row_sums;
};

// A chunk of the weight at column `col` (bounds-checked unless kVector), or ones without one.
template <bool kVector, typename W, int kElems>
__device__ __forceinline__ device::Vec<W, kElems> weight_chunk_at(const W* weight, int64_t col,
                                                                  int64_t n) {
  if (weight == nullptr) {
    device::Vec<W, kElems> ones;
#pragma unroll
    for (int e = 0; e < kElems; ++e) ones.v[e] = device::from_float<W>(1.f);
    return ones;
  }
  return device::load_chunk<kVector, W, kElems>(weight, col, n);
}

// One rounding from the accumulation type to an element type.
template <typename W>
__device__ __forceinline__ W round_to(float v) {
  return device::from_float<W>(v);
}
template <typename W>
__device__ __forceinline__ W round_to(double v) {
  if constexpr (std::is_same_v<W, float>) {
    return static_cast<float>(v);
  } else if constexpr (std::is_same_v<W, __half>) {
    return __double2half(v);
  } else {
    return __double2bfloat16(v);
  }
}

// A gradient policy: what the kernel computes per row, from one element's x, dy and g = dy * w
// (all in Acc) and the row's saved statistics.
//   Combine       the row's sums as one reduction on the row's lanes, in the fixed order
//                 (device::Sum of one value, or device::PairSum of two: one barrier a row)
//   kBiasGrad     whether a bias gradient is summed beside the weight's
//   Saved         the row's saved statistics as loaded (float32; load(p, row)), held while
//                 the next row's are prefetched; Stats: them in Acc (widen), for the row's math
//   add_terms     adds the element's terms to the row's sums, in element order
//   Coef finish   the row's coefficients from the reduced sums
//   dx            the element's dx, before its one rounding
//   weight_term   the element's dweight term added to a partial (bias_term: dbias's)
template <typename Acc>
struct RmsNormGrad {
  using Combine = device::Sum<Acc>;  // sum(g * x)
  static constexpr bool kBiasGrad = false;
  struct Saved {
    float r;
  };
  struct Stats {
    Acc r;
  };
  __device__ static Saved load(const BackwardParams& p, int64_t row) { return {p.rstd[row]}; }
  __device__ static Stats widen(const Saved& s) { return {s.r}; }
  __device__ static void add_terms(Acc xe, Acc g, const Stats&, Acc& sum) { sum = fma(g, xe, sum); }
  struct Coef {
    Acc r, c;
  };
  __device__ static Coef finish(Acc sum, const Stats& s, Acc inv_cols) {
    return {s.r, s.r * s.r * s.r * sum * inv_cols};
  }
  __device__ static Acc dx(Acc xe, Acc g, const Stats&, const Coef& k) {
    return fma(-k.c, xe, k.r * g);
  }
  __device__ static Acc weight_term(Acc xe, Acc dye, const Stats& s, Acc partial) {
    return fma(dye * xe, s.r, partial);
  }
  __device__ static Acc bias_term(Acc, Acc partial) { return partial; }
};

template <typename Acc>
struct LayerNormGrad {
  using Combine = device::PairSum<Acc>;  // (sum(g), sum(g * xhat))
  static constexpr bool kBiasGrad = true;
  struct Saved {
    float mean, r;
  };
  struct Stats {
    Acc mean, r;
  };
  __device__ static Saved load(const BackwardParams& p, int64_t row) {
    return {p.mean[row], p.rstd[row]};
  }
  __device__ static Stats widen(const Saved& s) { return {s.mean, s.r}; }
  __device__ static Acc xhat(Acc xe, const Stats& s) { return (xe - s.mean) * s.r; }
  __device__ static void add_terms(Acc xe, Acc g, const Stats& s, device::Pair<Acc>& sums) {
    sums.a += g;
    sums.b = fma(g, xhat(xe, s), sums.b);
  }
  struct Coef {
    Acc mean_g, mean_gxhat;
  };
  __device__ static Coef finish(const device::Pair<Acc>& sums, const Stats&, Acc inv_cols) {
    return {sums.a * inv_cols, sums.b * inv_cols};
  }
  __device__ static Acc dx(Acc xe, Acc g, const Stats& s, const Coef& k) {
    return s.r * (g - fma(xhat(xe, s), k.mean_gxhat, k.mean_g));
  }
  __device__ static Acc weight_term(Acc xe, Acc dye, const Stats& s, Acc partial) {
    return fma(dye, xhat(xe, s), partial);
  }
  __device__ static Acc bias_term(Acc dye, Acc partial) { return partial + dye; }
};

// Whether a thread holds its columns' weight in registers for the whole block: with vector I/O
// at 1 or 2 chunks, except where bias partials and a prefetched row of 2 chunks already take
// those registers (LayerNorm: holding all three spilled on sm_100a and sm_103a, ptxas); there
// the weight is read at each use, from L1 after the block's first row.
template <bool kBiasGrad>
constexpr bool holds_weight(bool vector, int chunks, bool prefetch) {
  return vector && chunks <= kBackwardPrefetchMaxChunks && !(kBiasGrad && prefetch && chunks == 2);
}

// GradOf: RmsNormGrad or LayerNormGrad (of device::RowAcc<T>); T: x/dy/dx element type; W:
// weight element type; kVector: every chunk a whole, aligned 16-byte vector (else element by
// element, bounds-checked); kChunks: the plan's chunks_per_thread; kPrefetch: the plan's
// prefetch_next_row; kCluster: a cluster per block, one CTA per slice of a long row.
//
// Registers (128 a thread: core/backward_plan.h, kBackwardMaxThreads): a thread holds its
// columns' partial sums for the whole block, and with vector I/O its row's chunks as raw words
// (device::Raw), converting at each use; with kPrefetch, the next row's too; with 1 or 2 chunks,
// its columns' weight (holds_weight). Element-wise rows hold no chunk: it is loaded where it is
// used (the second use hits L1); at 4 chunks a thread they spilled (ptxas), so the plan never asks
// for that.
template <template <typename> class GradOf, typename T, typename W, bool kVector, int kChunks,
          bool kPrefetch, bool kCluster>
__global__ void __launch_bounds__(kBackwardMaxThreads, 1)
    norm_backward_kernel(const BackwardParams p) {
  static_assert(kChunks == 1 || kChunks == 2 || (kVector && kChunks == kBackwardMaxChunksPerThread),
                "the plan's 1, 2 or (vector I/O) 4 chunks");
  static_assert(!kPrefetch || (kVector && kChunks <= kBackwardPrefetchMaxChunks),
                "prefetching holds two rows of raw 16-byte chunks");
  static_assert(!kCluster || (kVector && !kPrefetch && kChunks == kBackwardMaxChunksPerThread &&
                              kChunks * kBackwardMaxThreads == kSliceChunks),
                "a cluster CTA's 512 lanes of 4 vector chunks are one slice (backward_plan.h)");
  constexpr int kElems = 16 / sizeof(T);
  using XVec = device::Vec<T, kElems>;
  using WVec = device::Vec<W, kElems>;
  using Acc = device::RowAcc<T>;
  using AccVec = device::Vec<Acc, kElems>;
  using Grad = GradOf<Acc>;
  using Sums = typename Grad::Combine::Value;
  // Alternate rows' warp sums: a fast warp may write row i + 1's while a slow one reads row i's.
  static_assert(kBackwardMaxThreads / 32 <= kMaxWarpsPerCta, "a warp value per warp");
  __shared__ alignas(16) Sums warp_sums[2][kMaxWarpsPerCta];
  static_assert(!kCluster || sizeof(warp_sums) + 2 * kBackwardMaxClusterSlices * sizeof(Sums) <=
                                 kBackwardClusterStaticSmemBytes,
                "the planner counts these bytes (backward_clusters_on)");
  if constexpr (kCluster) device::cluster_arrive_relaxed();
  const int slice = kCluster ? static_cast<int>(device::cluster_rank()) : 0;
  const int64_t block = kCluster ? int64_t{device::cluster_index()} : int64_t{blockIdx.x};
  const int64_t slice_first = int64_t{slice} * kSliceChunks;  // the slice's first chunk

  // A cluster CTA's lanes are a slice's 512 (backward_plan_violation): a constant, so that its
  // columns are one base plus constants (LayerNorm's float32 rows spilled 12 bytes with them
  // computed from the parameter, ptxas sm_90a).
  const int tpr = kCluster ? kBackwardMaxThreads : p.threads_per_row;
  const int lane = threadIdx.x;  // block_threads = max(tpr, 32): lanes >= tpr own no chunk
  const int64_t n = p.cols;
  bool mine[kChunks];
  int64_t col[kChunks];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    col[i] = (slice_first + lane + int64_t{i} * tpr) * kElems;
    mine[i] = lane < tpr && slice_first + lane + int64_t{i} * tpr < p.chunks_per_row;
  }

  // This thread's columns of the weight, for every row of the block: held as loaded where
  // registers allow (holds_weight), else loaded at each use (L1 hits).
  constexpr bool kHoldsWeight = holds_weight<Grad::kBiasGrad>(kVector, kChunks, kPrefetch);
  const W* const weight = static_cast<const W*>(p.weight);
  device::Raw<WVec> held_w[kHoldsWeight ? kChunks : 1];
  if constexpr (kHoldsWeight) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (weight != nullptr && mine[i]) held_w[i] = device::load_raw<WVec>(weight + col[i]);
    }
  }
  auto weight_chunk = [&](int i) -> WVec {
    if constexpr (kHoldsWeight) {
      if (weight != nullptr) return device::unpack<WVec>(held_w[i]);
    }
    return weight_chunk_at<kVector, W, kElems>(weight, col[i], n);
  };

  const bool weight_grad = p.partials != nullptr;
  Acc partial[kChunks][kElems];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
#pragma unroll
    for (int e = 0; e < kElems; ++e) partial[i][e] = 0;
  }
  constexpr int kBiasChunks = Grad::kBiasGrad ? kChunks : 1;
  const bool bias_grad = Grad::kBiasGrad && p.bias_partials != nullptr;
  Acc bias_partial[kBiasChunks][Grad::kBiasGrad ? kElems : 1];
  if constexpr (Grad::kBiasGrad) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
#pragma unroll
      for (int e = 0; e < kElems; ++e) bias_partial[i][e] = 0;
    }
  }

  const int64_t first = block * p.block_rows;
  const int64_t end = first + p.block_rows < p.rows ? first + p.block_rows : p.rows;
  const T* const x = static_cast<const T*>(p.x);
  const T* const dy = static_cast<const T*>(p.dy);
  T* const dx = static_cast<T*>(p.dx);

  // kCluster: rows staged in shared memory, [row parity][x, dy][chunk i][lane] 16-byte slots
  // (consecutive lanes, consecutive slots: no bank conflicts). Each thread copies and reads back
  // its own slots only, so cp.async.wait_group orders them, no barrier.
  extern __shared__ uint4 stage[];
  static_assert(!kCluster || 2 * 2 * kChunks * kBackwardMaxThreads * sizeof(uint4) ==
                                 kBackwardClusterSmemBytes,
                "two rows of x and dy slices (core/backward_plan.h)");
  auto stage_slot = [&](int buf, int tensor, int i) {
    return ((buf * 2 + tensor) * kChunks + i) * kBackwardMaxThreads + lane;
  };
  auto stage_row = [&](int64_t row, int buf) {
    const RowIndex at = split_row(p.row_index, row);
    const T* const xr = x + row_offset(p.row_index, at, p.x_strides);
    const T* const dyr = dy + row_offset(p.row_index, at, p.dy_strides);
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      device::async_copy16_if(
          mine[i], static_cast<uint32_t>(__cvta_generic_to_shared(&stage[stage_slot(buf, 0, i)])),
          xr + col[i]);
      device::async_copy16_if(
          mine[i], static_cast<uint32_t>(__cvta_generic_to_shared(&stage[stage_slot(buf, 1, i)])),
          dyr + col[i]);
    }
    device::async_commit();
  };

  // Vector I/O of 1 or 2 chunks: a row's chunks (and with kPrefetch the next row's) wait as raw
  // words. Other rows are loaded where they are used.
  constexpr bool kHoldsRow = kVector && kChunks <= kBackwardPrefetchMaxChunks;
  device::Raw<XVec> held_x[kHoldsRow ? kChunks : 1], held_dy[kHoldsRow ? kChunks : 1];
  typename Grad::Saved held_stats{};
  auto load_row = [&](int64_t row) {
    if constexpr (kHoldsRow) {
      const RowIndex at = split_row(p.row_index, row);
      const T* const xr = x + row_offset(p.row_index, at, p.x_strides);
      const T* const dyr = dy + row_offset(p.row_index, at, p.dy_strides);
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        if (mine[i]) {
          held_x[i] = device::load_raw<XVec>(xr + col[i]);
          held_dy[i] = device::load_raw<XVec>(dyr + col[i]);
        }
      }
    }
    held_stats = Grad::load(p, row);
  };

  if (kPrefetch && first < end) load_row(first);
  if (kCluster && first < end) stage_row(first, 0);
  int parity = 0;  // the row's buffers: warp sums, slice sums and (kCluster) staged chunks
  for (int64_t row = first; row < end; ++row) {
    const RowIndex at = split_row(p.row_index, row);
    const T* const xr = x + row_offset(p.row_index, at, p.x_strides);
    const T* const dyr = dy + row_offset(p.row_index, at, p.dy_strides);
    T* const dxr = dx + row_offset(p.row_index, at, p.dx_strides);
    if constexpr (!kPrefetch) load_row(row);
    const int buf = parity;  // this row's staged chunks (parity flips before its second pass)
    device::Raw<XVec> cur_x[kHoldsRow ? kChunks : 1], cur_dy[kHoldsRow ? kChunks : 1];
    if constexpr (kHoldsRow) {
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        cur_x[i] = held_x[i];
        cur_dy[i] = held_dy[i];
      }
    }
    const typename Grad::Stats stats = Grad::widen(held_stats);
    if constexpr (kPrefetch) {
      if (row + 1 < end) load_row(row + 1);  // in flight during this row's reduction
    }
    if constexpr (kCluster) {
      // The next row's slice in flight during this row; this row's (the older group) landed.
      if (row + 1 < end) {
        stage_row(row + 1, buf ^ 1);
      } else {
        device::async_commit();  // an empty group: the wait below counts the same
      }
      device::async_wait<1>();
    }
    auto x_chunk = [&](int i) -> XVec {
      if constexpr (kHoldsRow) {
        return device::unpack<XVec>(cur_x[i]);
      } else if constexpr (kCluster) {
        return device::bit_cast<XVec>(stage[stage_slot(buf, 0, i)]);
      } else {
        return device::load_chunk<kVector, T, kElems>(xr, col[i], n);
      }
    };
    auto dy_chunk = [&](int i) -> XVec {
      if constexpr (kHoldsRow) {
        return device::unpack<XVec>(cur_dy[i]);
      } else if constexpr (kCluster) {
        return device::bit_cast<XVec>(stage[stage_slot(buf, 1, i)]);
      } else {
        return device::load_chunk<kVector, T, kElems>(dyr, col[i], n);
      }
    };

    // The row's sums: each lane's chunks in increasing order, element by element, then the tree.
    Sums sums = Grad::Combine::identity();
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (mine[i]) {
        const XVec xv = x_chunk(i), dyv = dy_chunk(i);
        const WVec wv = weight_chunk(i);
#pragma unroll
        for (int e = 0; e < kElems; ++e) {
          const Acc g = static_cast<Acc>(device::to_float(dyv.v[e])) *
                        static_cast<Acc>(device::to_float(wv.v[e]));
          Grad::add_terms(static_cast<Acc>(device::to_float(xv.v[e])), g, stats, sums);
        }
      }
    }
    sums = device::row_reduce<typename Grad::Combine>(sums, tpr, warp_sums[parity]);
    if constexpr (kCluster) {
      if (row == first) device::cluster_wait();  // every CTA of the cluster has started
      // Alternate rows' slice sums, one per CTA of the cluster.
      __shared__ Sums slice_sums[2][kBackwardMaxClusterSlices];
      const int ctas = static_cast<int>(device::cluster_ctas());  // the row's slices
      Sums* const row_sums = slice_sums[parity];
      if (lane < ctas) device::store_to_cluster_rank(&row_sums[slice], lane, sums);
      static_assert(kBackwardMaxClusterSlices <= 32, "the senders (lane < ctas) are one warp");
      device::cluster_sync_released_by(lane < 32);
      sums = Grad::Combine::identity();
      for (int k = 0; k < ctas; ++k) sums = Grad::Combine::combine(sums, row_sums[k]);
    }
    parity ^= 1;
    Acc inv_cols;
    if constexpr (std::is_same_v<Acc, double>) {
      inv_cols = p.inv_cols_d;
    } else {
      inv_cols = p.inv_cols;
    }
    const typename Grad::Coef coef = Grad::finish(sums, stats, inv_cols);

#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (mine[i]) {
        const XVec xv = x_chunk(i), dyv = dy_chunk(i);
        const WVec wv = weight_chunk(i);
        XVec out;
#pragma unroll
        for (int e = 0; e < kElems; ++e) {
          const Acc xe = static_cast<Acc>(device::to_float(xv.v[e]));
          const Acc dye = static_cast<Acc>(device::to_float(dyv.v[e]));
          const Acc g = dye * static_cast<Acc>(device::to_float(wv.v[e]));
          out.v[e] = round_to<T>(Grad::dx(xe, g, stats, coef));
          if (weight_grad) partial[i][e] = Grad::weight_term(xe, dye, stats, partial[i][e]);
          if constexpr (Grad::kBiasGrad) {
            if (bias_grad) bias_partial[i][e] = Grad::bias_term(dye, bias_partial[i][e]);
          }
        }
        device::store_chunk<kVector, T, kElems>(dxr, col[i], n, out);
      }
    }
  }

  if constexpr (kCluster) {
    if (first >= end) device::cluster_wait();  // no rows: the start barrier still completes
  }
  if (weight_grad) {
    Acc* const out = static_cast<Acc*>(p.partials) + block * n;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (mine[i]) {
        AccVec v;
#pragma unroll
        for (int e = 0; e < kElems; ++e) v.v[e] = partial[i][e];
        device::store_chunk<kVector, Acc, kElems>(out, col[i], n, v);
      }
    }
  }
  if constexpr (Grad::kBiasGrad) {
    if (bias_grad) {
      Acc* const out = static_cast<Acc*>(p.bias_partials) + block * n;
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        if (mine[i]) {
          AccVec v;
#pragma unroll
          for (int e = 0; e < kElems; ++e) v.v[e] = bias_partial[i][e];
          device::store_chunk<kVector, Acc, kElems>(out, col[i], n, v);
        }
      }
    }
  }
}

// dweight[j] = sum over blocks b, in order, of partials[b][j]; one thread per column.
// A plain loop over b, one thread a column, was latency-bound on L2 round trips: with 256
// blocks it cost a fixed 17-37 us a call, whatever M (H200, a sweep of block sizes). So
// kWeightGradReduceLoadsInFlight partials are loaded at once, then added in block order: the same
// adds in the same order (the same bits), a few round trips a column.
inline constexpr int kWeightGradReduceLoadsInFlight = 32;

template <typename Acc, typename W>
__global__ void __launch_bounds__(1024)
    weight_grad_reduce_kernel(const Acc* partials, int64_t blocks, int64_t cols, W* dweight) {
  constexpr int kLoads = kWeightGradReduceLoadsInFlight;
  const int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  const Acc* column = partials + j;
  Acc sum = 0;
  int64_t b = 0;
  for (; b + kLoads <= blocks; b += kLoads) {
    Acc batch[kLoads];
#pragma unroll
    for (int k = 0; k < kLoads; ++k) batch[k] = column[(b + k) * cols];
#pragma unroll
    for (int k = 0; k < kLoads; ++k) sum += batch[k];
  }
  for (; b < blocks; ++b) sum += column[b * cols];
  dweight[j] = round_to<W>(sum);
}

}  // namespace oink
