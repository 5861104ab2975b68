// The per-row-group schedules: one CTA per group of rows (one row, or several short ones), no
// persistence. norm_kernel<.., kChunks > 0> is `row_in_registers` (a row read once into
// registers, written once: the lowest latency, for decode and mid-size batches);
// norm_kernel<.., 0> is `two_pass` (rows of several slices the cluster schedule does not take:
// sum slice by slice in pass 1, re-read mostly from L2 and write in pass 2). See docs/kernels.md
// for when make_plan() picks which.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/plan.h"
#include "device/reduce.cuh"
#include "device/vec.cuh"
#include "kernels/norm_row.cuh"
#include "kernels/row_op.cuh"

namespace oink {

// kChunks: register capacity per lane (1 or 2), or 0 for the two-pass variant (RMSNorm rows
// only: LayerNorm's two statistics would read the row three times).
// kLanes: lanes of the row's reduction layout one thread plays (1, or kRegistersLanesPerThread:
// core/plan.h says when), folded as the tile folds them (device::folded_row_reduce): the same
// chunks, sums and tree as one lane a thread, so the same bits, with half the warps paying a
// row's fixed instructions. Lane j of thread t is lane (t / kGroup) * 32 + t % kGroup + j * kGroup
// (kGroup = 32 / kLanes threads share a lane warp); slot s = i * kLanes + j holds chunk i of lane
// j, chunk (lane + i * threads_per_row) of the row. One CTA of the largest block a plan launches
// must fit (minimum 1 CTA an SM, said outright: without it ptxas held the folded fused op to 64
// registers at 512 threads and spilled; with it 76, sm_90a).
template <typename T, typename W, typename Op, bool kVector, int kChunks, int kLanes = 1>
__global__ void __launch_bounds__(kMaxThreadsPerRow / kLanes, 1) norm_kernel(const KernelParams p) {
  using Row = RowOf<T, W, Op, kVector>;
  static_assert(kChunks > 0 || Op::kFamily == RowFamily::kRmsNorm, "two_pass is RMSNorm's");
  static_assert(kLanes == 1 || (kChunks > 0 && kVector), "folded lanes: vector registers rows");
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "a power of two");
  constexpr bool kAddsResidual = Op::kAddsResidual;
  using Acc = typename Row::Acc;
  using XVec = typename Row::XVec;
  using WVec = typename Row::WVec;
  constexpr int kElems = Row::kElems;
  __shared__ alignas(16) Acc warp_sums[kMaxWarpsPerCta];
  // LayerNorm's second reduction has its own warp values: it must not overwrite the first's
  // while a slow warp still reads them. (Unused, and not allocated, for RMSNorm rows.)
  __shared__ alignas(16) Acc second_warp_sums[Row::kReductions == 2 ? kMaxWarpsPerCta : 1];

  // Where this thread's row and chunks are: parameters and thread indices only, so it is worked
  // out before begin_rows's wait, while the preceding kernel finishes (with PDL); after the wait
  // the loads issue at once. threads_per_row is a power of two: a shift, not a division (a
  // division was ~20 dependent instructions in front of the first load, SASS sm_90a).
  const int tpr = p.threads_per_row;                     // the row's lanes
  const int threads = kLanes == 1 ? tpr : tpr / kLanes;  // the row's threads
  const int t = threadIdx.x & (threads - 1);
  const int64_t row = int64_t{blockIdx.x} * p.rows_per_cta + (threadIdx.x >> (__ffs(threads) - 1));
  // Threads past the last row still take part in the reductions (full-warp shuffles, barriers).
  const bool active = row < p.rows;
  const Row r(p, row, active);
  const int64_t chunks = p.chunks_per_row;

  if constexpr (kChunks > 0) {
    static_assert(kChunks <= kMaxChunksPerThread, "rows of one slice: at most 2 chunks per lane");
    constexpr int kGroup = 32 / kLanes;
    constexpr int kSlots = kChunks * kLanes;
    const int lane = kLanes == 1 ? t : (t / kGroup) * 32 + t % kGroup;  // this thread's first
    const auto chunk_of = [&](int s) {
      return lane + (s % kLanes) * kGroup + int64_t{s / kLanes} * tpr;
    };
    // Every load of x is issued before any value is used: a use between two guarded loads makes
    // the compiler wait for the first before issuing the second (SASS, 2026-11-30: x chunk 0, x
    // chunk 1 and the weight were three dependent memory round trips at M=1). The fused op's
    // residual joins x with vector I/O; element-wise, holding both streams spilled, so each
    // chunk's residual is loaded next to its use. Holding both streams doubles the bytes each
    // thread keeps in flight, which is why the fused op needs no streamed schedule (op_streams()
    // in core/plan.cpp). The weight is loaded (as raw words, below) once the row's sums are in,
    // behind the reduction's barrier: issued with x, ptxas put its loads first and x's waited
    // behind them (Nsight Compute at N=8192, M=64: 45 samples on the first use of x against
    // Liger's 22); after the barrier it arrives while the sums are added and 1/rms is found.
    constexpr bool kResidualFirst = kAddsResidual && kVector;
    // 16-bit chunks wait as raw words until every load is out (device::Raw); other chunks are
    // loaded straight into v (a second array for them spilled, ptxas).
    constexpr bool kRawX = device::kHoldsRaw<kVector, XVec>;
    constexpr bool kRawW = device::kHoldsRaw<kVector, WVec>;
    XVec v[kSlots];
    device::Raw<XVec> raw_x[kRawX ? kSlots : 1];
    XVec res[kResidualFirst && !kRawX ? kSlots : 1];
    device::Raw<XVec> raw_res[kResidualFirst && kRawX ? kSlots : 1];
    WVec w[kRawW ? 1 : kSlots];
    device::Raw<WVec> raw_w[kRawW ? kSlots : 1];
    bool mine[kSlots];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) mine[s] = active && chunk_of(s) < chunks;
    // Raw words load by predicate, not inside `if (mine[s])` (device::load_raw_if says why).
    begin_rows<W, kVector>(p);
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int64_t col = chunk_of(s) * kElems;
      if constexpr (kRawX) {
        raw_x[s] = device::load_raw_if<XVec>(mine[s], r.x + col);
      } else if (mine[s]) {
        v[s] = r.load_x(col);
      }
      if constexpr (kResidualFirst && kRawX) {
        raw_res[s] = device::load_raw_if<XVec>(mine[s], r.res + col);
      } else if constexpr (kResidualFirst) {
        if (mine[s]) res[s] = r.load_residual(col);
      }
    }
    const bool has_weight = r.weight != nullptr;
    auto load_weight = [&] {  // the reduction runs it after its barrier
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const int64_t col = chunk_of(s) * kElems;
        if constexpr (kRawW) {
          raw_w[s] = device::load_raw_if<WVec>(mine[s] && has_weight, r.weight + col);
        } else if (mine[s] && has_weight) {
          w[s] = r.load_given_weight(col);
        }
      }
    };
    // Each lane's chunks in increasing order, the lanes apart (slot s is lane s % kLanes's).
    Acc acc[kLanes];
#pragma unroll
    for (int j = 0; j < kLanes; ++j) acc[j] = 0;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      if (mine[s]) {
        if constexpr (kRawX) v[s] = device::unpack<XVec>(raw_x[s]);
        if constexpr (kAddsResidual) {
          const int64_t col = chunk_of(s) * kElems;
          if constexpr (kResidualFirst) {
            XVec residual;
            if constexpr (kRawX) {
              residual = device::unpack<XVec>(raw_res[s]);
            } else {
              residual = res[s];
            }
            v[s] = r.add_residual(col, v[s], residual);
          } else {
            v[s] = r.add_residual(col, v[s], r.load_residual(col));
          }
        }
        acc[s % kLanes] = Row::first_terms(v[s], acc[s % kLanes]);
      }
    }
    // The row's reduction of one term a lane (row_reduce), or of kLanes folded (the tile's).
    const auto reduce = [&](Acc(&lane_terms)[kLanes], Acc* sums, auto then) {
      using Statistic = typename Row::Statistic;
      if constexpr (kLanes == 1) {
        return device::row_reduce<Statistic>(lane_terms[0], tpr, sums, then);
      } else {
        return device::folded_row_reduce<kLanes, Statistic>(lane_terms, tpr, sums, then);
      }
    };
    typename Row::Stats stats = Row::finish_first(reduce(acc, warp_sums, load_weight), p);
    if constexpr (Row::kReductions == 2) {
      Acc second[kLanes];
#pragma unroll
      for (int j = 0; j < kLanes; ++j) second[j] = 0;
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        if (mine[s]) {
          second[s % kLanes] =
              r.second_terms(chunk_of(s) * kElems, v[s], second[s % kLanes], stats);
        }
      }
      stats = Row::finish_second(reduce(second, second_warp_sums, device::NoWork{}), p, stats);
    }
    Row::save_stats(p, row, active && t == 0, stats);
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      if (mine[s]) {
        WVec ws = Row::unit_weight();
        if (has_weight) {
          if constexpr (kRawW) {
            ws = device::unpack<WVec>(raw_w[s]);
          } else {
            ws = w[s];
          }
        }
        r.store_normalized(chunk_of(s) * kElems, v[s], ws, stats);
      }
    }
  } else {
    // Rows of several slices (core/plan.h, kSliceChunks) that the cluster schedule does not take:
    // pass 1 sums slice by slice (each lane's chunks of the slice in increasing order, the lanes
    // by device::row_reduce), the slices' sums added in slice order, as the cluster kernel adds
    // them; pass 2 re-reads the row (mostly from L2) and writes. A lane has at most
    // kTileMaxChunksPerLane chunks in a slice, both loaded before either is used. The fused op's
    // pass 2 re-reads the residual this same thread just stored.
    // Pass 2 batches 2 chunks of x and the weight: at 4 they spilled (ptxas).
    constexpr int kBatch = kTileMaxChunksPerLane;
    constexpr int kStoreBatch = 2;
    const int lane = t;  // one lane a thread (kLanes == 1)
    __shared__ alignas(16)
        Acc more_warp_sums[kMaxWarpsPerCta];  // alternate slices: a slow warp may still
    begin_rows<W, kVector>(p);                // read the last slice's sums
    Acc total = 0;
    for (int slice = 0; slice < p.slices; ++slice) {
      Acc acc = 0;
      if (active) {
        const int64_t base = int64_t{slice} * kSliceChunks + lane;
        XVec v[kBatch];
        XVec res[kAddsResidual ? kBatch : 1];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int64_t chunk = base + int64_t{j} * tpr;
          if (chunk < chunks && j * tpr < kSliceChunks) {
            v[j] = r.load_x(chunk * kElems);
            if constexpr (kAddsResidual) res[j] = r.load_residual(chunk * kElems);
          }
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int64_t chunk = base + int64_t{j} * tpr;
          if (chunk < chunks && j * tpr < kSliceChunks) {
            if constexpr (kAddsResidual) v[j] = r.add_residual(chunk * kElems, v[j], res[j]);
            acc = Row::add_squares(v[j], acc);
          }
        }
      }
      total += device::row_reduce<typename Row::Statistic>(
          acc, tpr, slice % 2 == 0 ? warp_sums : more_warp_sums);
    }
    const Acc rstd = Row::inv_rms(total, p);
    Row::save_stats(p, row, active && lane == 0, rstd);
    if (active) {
      const T* src = kAddsResidual ? r.res : r.x;
      for (int64_t base = lane; base < chunks; base += int64_t{kStoreBatch} * tpr) {
        XVec v[kStoreBatch];
        WVec w[kStoreBatch];
#pragma unroll
        for (int j = 0; j < kStoreBatch; ++j) {
          const int64_t col = (base + int64_t{j} * tpr) * kElems;
          if (col < r.n) {
            v[j] = device::load_chunk<kVector, T, kElems>(src, col, r.n);
            w[j] = r.load_weight(col);
          }
        }
#pragma unroll
        for (int j = 0; j < kStoreBatch; ++j) {
          const int64_t col = (base + int64_t{j} * tpr) * kElems;
          if (col < r.n) r.store_normalized(col, v[j], w[j], rstd);
        }
      }
    }
  }
}

}  // namespace oink
