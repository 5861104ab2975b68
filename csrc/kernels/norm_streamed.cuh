// The `streamed` schedule, for large rmsnorm batches: persistent CTAs, each looping over row
// groups blockIdx.x, blockIdx.x + gridDim.x, ... with `stages` groups in flight. cp.async copies
// each thread's own chunks of x (and the residual) into its own shared-memory slots, so no
// barrier guards a slot; the only barrier is the row reduction's.
//
// At the copy ceiling an SM must consume a 16-byte chunk about every second cycle, so
// instructions per chunk bound this kernel as much as bytes in flight do: the first version
// (runtime chunk loops, 64-bit bounds per chunk, a division in the reduction) issued ~230
// instructions per chunk (SASS, 2026-11-30). Hence: chunks per thread is a template parameter
// (the loops unroll), a thread's chunk count and column offsets are worked out once, not per row,
// and the reduction indexes warps with masks.
#pragma once

#include <cstdint>

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
//   weight [cpt][pieces of W]              (fetched once: the same columns every row)
//   stage  [stages][x, residual][cpt]
// kChunks: the instantiation's capacity, >= cpt (a plan of 3 chunks runs the 4-chunk kernel).
// Vector I/O only (the plan guarantees aligned 16-byte chunks).
// Registers: 32 per thread keeps two 1024-thread CTAs resident. Plans of 3 or 4 chunks have
// 1024-thread CTAs with at least 144 KiB of shared memory, one per SM, so that kernel may use 64.
template <typename T, typename W, bool kFused, int kChunks>
__global__ void __launch_bounds__(1024, kChunks <= 2 ? 2 : 1)
    norm_streamed_kernel(const KernelParams p) {
  using Row = NormRow<T, W, kFused, true>;
  using Acc = typename Row::Acc;
  using XVec = typename Row::XVec;
  using WVec = typename Row::WVec;
  constexpr int kElems = Row::kElems;
  constexpr int kWeightPieces = sizeof(WVec) / 16;
  extern __shared__ uint4 slots[];
  __shared__ alignas(16) Acc warp_sums[2][32];  // alternate rows: a slow warp may still read
  begin_pdl<W, true>(p);                        // the last row's

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
  const int residual_offset = cpt * block;
  const int stage_stride = (kFused ? 2 : 1) * residual_offset;

  if (has_weight) {  // completes with the first stage's group
    const char* weight = static_cast<const char*>(p.weight) + lane * sizeof(WVec);
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (i < own) {
#pragma unroll
        for (int k = 0; k < kWeightPieces; ++k) {
          device::async_copy16(weight_slots + (i * kWeightPieces + k) * block,
                               weight + (int64_t{i} * tpr * sizeof(WVec) + k * 16));
        }
      }
    }
  }
  auto issue = [&](int64_t group, int stage) {
    const int64_t row = group * p.rows_per_cta + row_in_group;
    if (row < p.rows) {  // implies group < groups
      uint4* const s = stage_slots + stage * stage_stride;
      const T* x = static_cast<const T*>(p.x) + row * p.ld_x + col0;
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        if (i < own) device::async_copy16(s + i * block, x + i * step);
      }
      if constexpr (kFused) {
        const T* res = static_cast<const T*>(p.residual) + row * p.ld_residual + col0;
#pragma unroll
        for (int i = 0; i < kChunks; ++i) {
          if (i < own) device::async_copy16(s + residual_offset + i * block, res + i * step);
        }
      }
    }
    device::async_commit();  // one group per stage, empty past the end: the counts stay uniform
  };

  const int stages = p.stages;
  for (int s = 0; s + 1 < stages; ++s) issue(blockIdx.x + int64_t{s} * gridDim.x, s);
  int stage = 0;
  int parity = 0;
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
    // Refill the stage consumed last iteration (this thread's own slots: it is done with them).
    issue(group + int64_t{stages - 1} * gridDim.x, stage == 0 ? stages - 1 : stage - 1);
    device::async_wait_dynamic(stages - 1);  // this group's copies (and the weight) have landed

    const int64_t row = group * p.rows_per_cta + row_in_group;
    const bool active = row < p.rows;
    const Row r(p, row, active);
    uint4* const s = stage_slots + stage * stage_stride;
    Acc acc = 0;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (active && i < own) {
        XVec v = read_slots<XVec>(s + i * block, block);
        if constexpr (kFused) {
          v = r.add_residual(col0 + i * step, v,
                             read_slots<XVec>(s + residual_offset + i * block, block));
          *reinterpret_cast<XVec*>(s + i * block) = v;  // keep the rounded sum for the store
        }
        acc = Row::add_squares(v, acc);
      }
    }
    const Acc rstd = Row::inv_rms(device::row_sum(acc, tpr, warp_sums[parity]), p);
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (active && i < own) {
        const XVec v = read_slots<XVec>(s + i * block, block);
        const WVec w = has_weight
                           ? read_slots<WVec>(weight_slots + i * kWeightPieces * block, block)
                           : r.load_weight(0);  // all ones
        r.store_normalized(col0 + i * step, v, w, rstd);
      }
    }
    stage = stage + 1 == stages ? 0 : stage + 1;
    parity ^= 1;
  }
}

}  // namespace oink
