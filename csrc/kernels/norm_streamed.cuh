// The `streamed` schedule, for large rmsnorm batches with a float32 weight on 16-bit rows of 64 to
// 127 lanes (N 520-1024: too few lanes for the tile, which holds that weight in registers on
// longer rows): persistent CTAs, each looping over row groups blockIdx.x,
// blockIdx.x + gridDim.x, ... with `stages` groups in flight, the weight converted into shared
// memory once per CTA. cp.async copies each thread's own chunks of x into its own shared-memory
// slots, so no barrier guards a slot; the only barrier is the row reduction's. (Narrower weights
// and the fused op do not stream: their registers schedule was faster at every size; see
// op_streams() in core/plan.cpp.)
//
// At the copy ceiling an SM must consume a 16-byte chunk about every second cycle, so
// instructions per chunk bound this kernel as much as bytes in flight do: the first version
// (runtime chunk loops, 64-bit bounds per chunk, a division in the reduction) issued ~230
// instructions per chunk (SASS, 2026-11-30). Hence: chunks per thread is a template parameter
// (the loops unroll), a thread's chunk count and column offsets are worked out once, not per row,
// the issue side keeps a row cursor and 32-bit shared addresses, the weight waits in shared
// memory already converted to float, and the reduction indexes warps with masks.
#pragma once

#include <cstdint>

#include "core/plan.h"
#include "device/async.cuh"
#include "device/reduce.cuh"
#include "device/vec.cuh"
#include "kernels/norm_row.cuh"

namespace oink {

// 16-byte pieces of shared memory, each written (by cp.async or a store) and read by one thread.
template <typename V>
__device__ __forceinline__ V read_slots(const uint4* slot, int stride) {
  constexpr int kPieces = sizeof(V) / 16;
  union {
    uint4 pieces[kPieces];
    V vec;
  } u;
#pragma unroll
  for (int k = 0; k < kPieces; ++k) u.pieces[k] = slot[k * stride];
  return u.vec;
}

// Shared memory, in 16-byte slots of blockDim.x (one per thread), `cpt` = the plan's
// chunks_per_thread:
//   weight [cpt][pieces of Vec<float, kElems>]  (loaded and converted to float once per CTA:
//                                               the same columns every row)
//   stage  [stages][cpt]
// Op: RmsNormOp or RmsNormSavingRstdOp (rmsnorm only: see op_streams() in core/plan.cpp).
// kChunks: the instantiation's capacity, the plan's cpt (2: the streamed rows of 64-127 lanes
// have 65-128 chunks; core/plan.cpp, streamed_lanes).
// Vector I/O only (the plan guarantees aligned 16-byte chunks).
// Registers: 64 per thread (at 32, to keep 2048 threads resident, the compiler recomputed
// addresses every row and the kernel was issue-bound); the planner keeps at most
// kStreamedThreadsPerSm (1024) of these threads on an SM.
template <typename T, typename W, typename Op, int kChunks>
__global__ void __launch_bounds__(kMaxThreadsPerRow, 1) norm_streamed_kernel(const KernelParams p) {
  static_assert(!Op::kAddsResidual, "the streamed schedule runs rmsnorm only");
  static_assert(sizeof(W) > sizeof(T), "a weight wider than x only (op_streams in core/plan.cpp)");
  using Row = NormRow<T, W, Op, /*kVector=*/true>;
  using Acc = typename Row::Acc;
  using XVec = typename Row::XVec;
  using WVec = typename Row::WVec;
  constexpr int kElems = Row::kElems;
  using FloatW = device::Vec<float, kElems>;  // the weight as the arithmetic uses it
  constexpr int kWeightPieces = sizeof(FloatW) / 16;
  extern __shared__ uint4 slots[];
  __shared__ alignas(16)
      Acc warp_sums[2][kMaxWarpsPerCta];  // alternate rows: a slow warp may still read
  begin_rows<W, true>(p);                 // the last row's

  const int tpr = p.threads_per_row;  // a power of two
  const int block = blockDim.x;
  const int lane = threadIdx.x & (tpr - 1);
  const int row_in_group = threadIdx.x >> (__ffs(tpr) - 1);
  const int64_t groups = (p.rows + p.rows_per_cta - 1) / p.rows_per_cta;
  // This thread's chunks are lane + i * tpr for i < own, at columns col0 + i * step. 32-bit
  // columns: a streamed row fits in shared memory.
  const int chunks = static_cast<int>(p.chunks_per_row);
  int own = 0;
#pragma unroll
  for (int i = 0; i < kChunks; ++i) own += lane + i * tpr < chunks ? 1 : 0;
  const int col0 = lane * kElems;
  const int step = tpr * kElems;

  const int cpt = p.chunks_per_thread;
  const bool has_weight = p.weight != nullptr;  // no weight, no weight slots (the plan's layout)
  uint4* const weight_slots = slots + threadIdx.x;
  uint4* const stage_slots = weight_slots + (has_weight ? cpt * kWeightPieces : 0) * block;
  const int stage_stride = cpt * block;
  const uint32_t stage_slots_smem = static_cast<uint32_t>(__cvta_generic_to_shared(stage_slots));

  // Rows are issued in order, blockIdx.x, + gridDim.x, ...: a cursor, so each issue costs one
  // 64-bit add, not a row's address arithmetic. Offsets past the last row are never used.
  const int64_t row_step = int64_t{gridDim.x} * p.rows_per_cta;
  int64_t issue_row = int64_t{blockIdx.x} * p.rows_per_cta + row_in_group;
  // Rows of one stride (the planner streams no other layout: op_streams in core/plan.cpp).
  const int64_t ld_x = p.x_step;
  int64_t issue_x = issue_row * ld_x + col0;
  const int64_t x_step = row_step * ld_x;
  const T* const x = static_cast<const T*>(p.x);
  auto issue = [&](int stage) {
    if (issue_row < p.rows) {
      const uint32_t s = stage_slots_smem + 16u * static_cast<uint32_t>(stage * stage_stride);
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        if (i < own) device::async_copy16(s + 16u * i * block, x + issue_x + i * step);
      }
    }
    device::async_commit();  // one group per stage, empty past the end: the counts stay uniform
    issue_row += row_step;
    issue_x += x_step;
  };

  const int stages = p.stages;
  for (int s = 0; s + 1 < stages; ++s) issue(s);
  if (has_weight) {  // while the first rows are in flight; every load before any conversion
    const W* weight = static_cast<const W*>(p.weight) + col0;
    WVec w[kChunks];
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (i < own) w[i] = device::load_vec<W, kElems>(weight + i * step);
    }
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (i < own) {
        union {
          FloatW f;
          uint4 pieces[kWeightPieces];
        } u;
#pragma unroll
        for (int e = 0; e < kElems; ++e) u.f.v[e] = device::to_float(w[i].v[e]);
#pragma unroll
        for (int k = 0; k < kWeightPieces; ++k) {
          weight_slots[(i * kWeightPieces + k) * block] = u.pieces[k];
        }
      }
    }
  }
  int stage = 0;
  int parity = 0;
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
    // Refill the stage consumed last iteration (this thread's own slots: it is done with them).
    issue(stage == 0 ? stages - 1 : stage - 1);  // row group group + (stages - 1) * gridDim.x
    device::async_wait_dynamic(stages - 1);      // this group's copies have landed

    const int64_t row = group * p.rows_per_cta + row_in_group;
    const bool active = row < p.rows;
    const Row r(p, row, active);
    uint4* const s = stage_slots + stage * stage_stride;
    Acc acc = 0;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (active && i < own) acc = Row::add_squares(read_slots<XVec>(s + i * block, block), acc);
    }
    const Acc rstd =
        Row::inv_rms(device::row_reduce<typename Row::Statistic>(acc, tpr, warp_sums[parity]), p);
    Row::save_stats(p, row, active && lane == 0, rstd);
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (active && i < own) {
        const XVec v = read_slots<XVec>(s + i * block, block);
        if (has_weight) {
          const FloatW w = read_slots<FloatW>(weight_slots + i * kWeightPieces * block, block);
          r.store_normalized(col0 + i * step, v, w, rstd);
        } else {
          r.store_normalized(col0 + i * step, v, Row::ones(), rstd);
        }
      }
    }
    stage = stage + 1 == stages ? 0 : stage + 1;
    parity ^= 1;
  }
  device::pdl_launch_dependents();  // persistent: the next kernel's CTAs come as these retire
}

}  // namespace oink
