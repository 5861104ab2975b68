// The `tile` schedule, for rmsnorm batches from a wave of rows up: one small CTA per row group,
// launched once (no persistence), each thread playing kTileLanesPerThread lanes of the row's
// reduction layout with up to kTileMaxChunksPerLane chunks per lane: 8 chunks per thread.
//
// Why this shape (docs/kernels.md, "tile"): a row's fixed cost (address, barrier, warp-sum loop)
// is paid once per 8 chunks per thread instead of once per 2, and a row's barrier stalls at most
// 8 warps, not a whole SM. Pipelining happens across CTAs: the block scheduler starts a CTA on an
// SM as soon as one exits, so no stage ring is needed inside one.
//
// Why folded lanes, not fewer threads per row: a row's bits are fixed by its reduction layout
// (threads_per_row lanes, chunk c on lane c % threads_per_row, see core/plan.h), which decode
// batches run one lane per thread. A tile thread holds the chunks of kTileLanesPerThread lanes
// that the first steps of that butterfly would pair (lanes g, g + 8, g + 16, g + 24 of a lane
// warp), sums each lane's chunks in the lane's order, and pairs them as the butterfly would
// (device::folded_row_sum): every addition of the one-lane-per-thread schedule, in its order.
//
// Per thread: its chunks of x (and of the residual, fused op) are copied with cp.async into its
// own shared-memory slots in one group; the weight's chunks are loaded into registers while those
// copies fly; then one wait, the
// fused op's add (stored to the residual, and back into x's slot), the sums of squares, the row
// reduction, and the scaled store re-reading the slots. A slot is written and read by the same
// thread only, so the reduction's barrier is the only one.
#pragma once

#include <cstdint>

#include "core/plan.h"
#include "device/async.cuh"
#include "device/reduce.cuh"
#include "device/vec.cuh"
#include "kernels/norm_row.cuh"

namespace oink {

// The weight's chunks wait in registers across the reduction: 8 chunks of a 16-bit weight (32
// registers), or of a float32 weight on float32 rows. The planner keeps a float32 weight on
// 16-bit rows (64 registers) off this schedule (tile_weight_fits in core/plan.cpp).
inline constexpr int kTileWeightRegisterBytes = kTileSlotsPerThread * 16;
// 16-bit rmsnorm rows are compiled for 64 registers per thread (4 CTAs of 256 threads, or 8 of
// 128, per SM: enough rows in flight to reach the copy ceiling); the fused op (two streams) and
// float32 rows (float64 sums) get what they need.
template <typename T, bool kFused>
inline constexpr int kTileMinCtasPerSm = sizeof(T) == 2 && !kFused ? 4 : 1;

// Shared memory: [stream][slot s][thread], 16 bytes each; stream 1 is the fused op's residual.
template <typename T, typename W, bool kFused>
__global__ void __launch_bounds__(kTileMaxThreads, (kTileMinCtasPerSm<T, kFused>))
    norm_tile_kernel(const KernelParams p) {
  using Row = NormRow<T, W, kFused, /*kVector=*/true>;
  using Acc = typename Row::Acc;
  using XVec = typename Row::XVec;
  using WVec = typename Row::WVec;
  constexpr int kElems = Row::kElems;
  constexpr int kLanes = kTileLanesPerThread;
  constexpr int kPerLane = kTileMaxChunksPerLane;
  constexpr int kGroup = 32 / kLanes;  // threads that share one lane warp
  static_assert(kLanes * kPerLane * sizeof(WVec) <= kTileWeightRegisterBytes,
                "the weight waits in registers: never wider than x (planner)");
  constexpr bool kRawW = device::kHoldsRaw<true, WVec>;
  static_assert(sizeof(XVec) == 16, "a chunk is one slot");
  extern __shared__ uint4 slots[];
  __shared__ alignas(16) Acc warp_sums[kTileMaxThreads * kLanes / 32];
  static_assert(sizeof(warp_sums) <= kTileStaticSmemBytes, "the planner counts these bytes");
  begin_pdl<W, true>(p);

  const int tpr = p.threads_per_row;  // lanes per row: a power of two >= 32 * kLanes
  const int threads = tpr / kLanes;   // this CTA's threads per row, whole warps
  const int t = threadIdx.x & (threads - 1);
  const int64_t row = int64_t{blockIdx.x} * p.rows_per_cta + threadIdx.x / threads;
  // Threads past the last row still take part in the reduction (full-warp shuffles, barrier).
  const bool active = row < p.rows;
  const Row r(p, row, active);
  // Lane j of this thread is lane (t / kGroup) * 32 + t % kGroup + j * kGroup of the row; its
  // chunks are that lane and that lane + tpr (the second only where the row has it). Slot
  // s = i * kLanes + j holds chunk i of lane j.
  const int chunks = static_cast<int>(p.chunks_per_row);  // <= kPerLane * tpr
  const int base = (t / kGroup) * 32 + t % kGroup;
  auto chunk_of = [&](int s) { return base + (s % kLanes) * kGroup + (s / kLanes) * tpr; };
  bool mine[kLanes * kPerLane];
#pragma unroll
  for (int s = 0; s < kLanes * kPerLane; ++s) mine[s] = active && chunk_of(s) < chunks;
  // Addresses from one base per thread and fixed steps: at M=1 a thread's instructions are the
  // row's critical path, and a per-chunk 64-bit multiply cost ~0.1-0.2 us (H200).
  const int first = base * kElems;
  auto offset_of = [&](int s) { return chunk_of(s) * kElems - first; };

  const int block = blockDim.x;
  uint4* const x_slots = slots + threadIdx.x;
  uint4* const res_slots = x_slots + kLanes * kPerLane * block;
  {
    const uint32_t x_smem = static_cast<uint32_t>(__cvta_generic_to_shared(x_slots));
    const uint32_t slot_step = 16u * static_cast<uint32_t>(block);
    const T* const x = r.x + first;
#pragma unroll
    for (int s = 0; s < kLanes * kPerLane; ++s) {
      if (mine[s]) device::async_copy16(x_smem + s * slot_step, x + offset_of(s));
    }
    if constexpr (kFused) {
      const uint32_t res_smem = x_smem + kLanes * kPerLane * slot_step;
      const T* const res = r.res + first;
#pragma unroll
      for (int s = 0; s < kLanes * kPerLane; ++s) {
        if (mine[s]) device::async_copy16(res_smem + s * slot_step, res + offset_of(s));
      }
    }
    device::async_commit();
  }

  // The weight: every load issued before the copies are waited for.
  const bool has_weight = r.weight != nullptr;
  WVec w[kRawW ? 1 : kLanes * kPerLane];
  device::Raw<WVec> raw_w[kRawW ? kLanes * kPerLane : 1];
  if (has_weight) {
    const W* const weight = r.weight + first;
#pragma unroll
    for (int s = 0; s < kLanes * kPerLane; ++s) {
      if (mine[s]) {
        if constexpr (kRawW) {
          raw_w[s] = device::load_raw<WVec>(weight + offset_of(s));
        } else {
          w[s] = r.load_given_weight(first + offset_of(s));
        }
      }
    }
  }
  device::async_wait<0>();

  // Each lane's chunks in increasing order, as the lane's own thread would sum them.
  Acc lane_sums[kLanes];
#pragma unroll
  for (int j = 0; j < kLanes; ++j) {
    lane_sums[j] = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int s = i * kLanes + j;
      if (mine[s]) {
        XVec v = device::bit_cast<XVec>(x_slots[s * block]);
        if constexpr (kFused) {
          // The rounded sum is what gets normalised; it replaces x in the slot.
          v = r.add_residual(first + offset_of(s), v, device::bit_cast<XVec>(res_slots[s * block]));
          x_slots[s * block] = device::bit_cast<uint4>(v);
        }
        lane_sums[j] = Row::add_squares(v, lane_sums[j]);
      }
    }
  }
  const Acc rstd = Row::inv_rms(device::folded_row_sum<kLanes>(lane_sums, tpr, warp_sums), p);
#pragma unroll
  for (int s = 0; s < kLanes * kPerLane; ++s) {
    if (mine[s]) {
      const XVec v = device::bit_cast<XVec>(x_slots[s * block]);
      const int64_t col = first + offset_of(s);
      WVec ws = Row::unit_weight();
      if (has_weight) {
        if constexpr (kRawW) {
          ws = device::unpack<WVec>(raw_w[s]);
        } else {
          ws = w[s];
        }
      }
      r.store_normalized(col, v, ws, rstd);
    }
  }
}

}  // namespace oink
