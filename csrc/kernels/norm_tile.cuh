// The `tile` schedule, for rmsnorm and layernorm batches from a wave of rows up: one small CTA
// per row group,
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
// (device::folded_row_reduce): every addition of the one-lane-per-thread schedule, in its order.
//
// Per thread: its chunks of x (and of the residual, fused op) are copied with cp.async into its
// own shared-memory slots in one group; the weight's chunks are loaded into registers while those
// copies fly; then one wait, the fused op's add (stored to the residual, and back into x's slot),
// the row's statistics (RMSNorm: the sum of squares; LayerNorm: the sum, then the squared
// deviations from its mean, re-reading the slots), each a folded row reduction, and the scaled
// store re-reading the slots. A slot is written and read by the same thread only, so the
// reductions' barriers are the only ones. The row's arithmetic is its row type's (RowOf:
// NormRow or LayerNormRow), as in the registers kernel, so both schedules give the same bits.
#pragma once

#include <cstdint>

#include "core/plan.h"
#include "device/async.cuh"
#include "device/reduce.cuh"
#include "device/vec.cuh"
#include "kernels/norm_row.cuh"
#include "kernels/row_op.cuh"

namespace oink {

// A thread's weight chunks held in registers across the reduction (core/plan.h,
// NormPlan::weight_held_chunks): 32 registers for a 16-bit weight or a float32 weight on float32
// rows, 64 for a float32 weight on 16-bit rows, which stays float32 (the leaders hold it the same
// way: Quack loads it into registers while its x copies fly). The tile holds all of them, but
// LayerNorm's weight and bias are read at the store.
template <typename Op>
inline constexpr int kTileHeldChunks =
    Op::kFamily == RowFamily::kLayerNorm ? 0 : kTileSlotsPerThread;
// 16-bit rmsnorm rows are compiled for 64 registers per thread (kTileThreadsPerSm: 4 CTAs of 256
// threads, or 8 of 128, per SM: enough rows in flight to reach the copy ceiling), or 128 where
// the weight held beside them is wider (kHeldWideWeightThreadsPerSm: a float32 weight's 8 chunks,
// 64 registers); the fused op (two streams) and float32 rows (float64 sums) get what they need.
template <typename T, typename W, typename Op, int kHeldChunks>
inline constexpr int kTileMinCtasPerSm =
    sizeof(T) != 2 || Op::kStreams != 1 ? 1
    : kHeldChunks*(16 / sizeof(T)) * sizeof(W) > kTileSlotsPerThread * 16
        ? kHeldWideWeightThreadsPerSm / kTileMaxThreads
        : kTileThreadsPerSm / kTileMaxThreads;

// One thread's share of a tile: the chunks of kTileLanesPerThread lanes of one slice of a row
// (the whole row in the tile kernel, one CTA's slice in the cluster kernel), staged in this
// thread's shared-memory slots, with the weight's first kHeldChunks chunks in registers (the
// rest read at the store). Shared memory:
// [stream][slot s][thread], 16 bytes each; stream 1 is the fused op's residual.
//
// Lane j of thread t is lane (t / kGroup) * 32 + t % kGroup + j * kGroup of the slice's `lanes`;
// its chunks are that lane and that lane + lanes (the second only where the slice has it), at
// chunk `slice_first` of the row onwards. Slot s = i * kLanes + j holds chunk i of lane j.
template <typename T, typename W, typename Op, int kHeldChunks>
struct TileThread {
  using Row = RowOf<T, W, Op, /*kVector=*/true>;
  using Stats = typename Row::Stats;
  using Acc = typename Row::Acc;
  using XVec = typename Row::XVec;
  using WVec = typename Row::WVec;
  static constexpr int kElems = Row::kElems;
  static constexpr int kLanes = kTileLanesPerThread;
  static constexpr int kSlots = kTileSlotsPerThread;
  static constexpr int kGroup = 32 / kLanes;  // threads that share one lane warp
  static constexpr bool kAddsResidual = Op::kAddsResidual;
  static constexpr int kStreams = Op::kStreams;
  // Slots whose weight chunk waits in registers, loaded while the copies fly: the first
  // kHeldSlots (the store's first ones); the others' are loaded at the store.
  static constexpr int kHeldSlots = kHeldChunks;
  static_assert(kHeldSlots >= 0 && kHeldSlots <= kSlots, "held chunks are some of the slots");
  static_assert(Op::kFamily != RowFamily::kLayerNorm || kHeldSlots == 0,
                "LayerNorm reads its weight and bias at the store");
  static constexpr bool kRawW = kHeldSlots > 0 && device::kHoldsRaw<true, WVec>;
  static constexpr int kWeightRegs = kHeldSlots > 0 ? kHeldSlots : 1;  // 1: unused
  static_assert(sizeof(XVec) == 16, "a chunk is one slot");

  const Row& r;
  const int lanes;  // a power of two >= 32 * kLanes
  const int first;  // the row's element where this thread's first chunk starts
  const int block;  // blockDim.x: the slot stride
  uint4* const x_slots;
  bool mine[kSlots];
  WVec w[kRawW ? 1 : kWeightRegs];
  device::Raw<WVec> raw_w[kRawW ? kWeightRegs : 1];

  // t: this thread's index among the slice's lanes / kLanes threads; slice_chunks <= 2 * lanes.
  __device__ TileThread(const Row& row, int t, int lanes_, int slice_first, int slice_chunks,
                        bool active, uint4* slots)
      : r(row),
        lanes(lanes_),
        first((slice_first + (t / kGroup) * 32 + t % kGroup) * kElems),
        block(blockDim.x),
        x_slots(slots + threadIdx.x) {
    const int base = (t / kGroup) * 32 + t % kGroup;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) mine[s] = active && base + chunk_step(s) < slice_chunks;
  }

  // Chunks from this thread's first one: fixed steps, so that every address is one base plus a
  // constant or `lanes`. At M=1 a thread's instructions are the row's critical path, and a
  // per-chunk 64-bit multiply cost ~0.1-0.2 us (H200).
  __device__ int chunk_step(int s) const { return (s % kLanes) * kGroup + (s / kLanes) * lanes; }
  __device__ int offset_of(int s) const { return chunk_step(s) * kElems; }

  // The copies of x (and the residual) into the slots, one group; then the weight's loads into
  // registers, all issued before the copies are waited for.
  __device__ void issue() {
    const uint32_t x_smem = static_cast<uint32_t>(__cvta_generic_to_shared(x_slots));
    const uint32_t slot_step = 16u * static_cast<uint32_t>(block);
    const T* const x = r.x + first;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      device::async_copy16_if(mine[s], x_smem + s * slot_step, x + offset_of(s));
    }
    if constexpr (kAddsResidual) {
      const uint32_t res_smem = x_smem + kSlots * slot_step;
      const T* const res = r.res + first;
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        device::async_copy16_if(mine[s], res_smem + s * slot_step, res + offset_of(s));
      }
    }
    device::async_commit();
    if (kHeldSlots > 0 && r.weight != nullptr) {
      const W* const weight = r.weight + first;
#pragma unroll
      for (int s = 0; s < kHeldSlots; ++s) {
        if constexpr (kRawW) {
          raw_w[s] = device::load_raw_if<WVec>(mine[s], weight + offset_of(s));
        } else if (mine[s]) {
          w[s] = r.load_given_weight(first + offset_of(s));
        }
      }
    }
  }

  // Waits for the copies; the fused op adds and stores the new residual (and keeps the rounded
  // sum in x's slot); returns the slice's sum of the first reduction's terms (RMSNorm: the
  // squares; LayerNorm: the elements) in the one-lane-per-thread order
  // (device::folded_row_reduce: every thread of the slice gets the same bits).
  __device__ Acc slice_sum(Acc* warp_sums) {
    device::async_wait<0>();
    uint4* const res_slots = x_slots + kSlots * block;
    return fold_slots(
        [&](int s, Acc acc) {
          XVec v = device::bit_cast<XVec>(x_slots[s * block]);
          if constexpr (kAddsResidual) {
            v = r.add_residual(first + offset_of(s), v,
                               device::bit_cast<XVec>(res_slots[s * block]));
            x_slots[s * block] = device::bit_cast<uint4>(v);
          }
          return Row::first_terms(v, acc);
        },
        warp_sums);
  }

  // A row of one slice (the tile kernel): its statistics, after slice_sum's reduction the
  // second one where the row type has it, into a warp-sum buffer of its own (a slow warp may
  // still read the first's).
  __device__ Stats row_stats(const KernelParams& p, Acc* warp_sums, Acc* second_warp_sums) {
    Stats stats = Row::finish_first(slice_sum(warp_sums), p);
    if constexpr (Row::kReductions == 2) {
      stats = Row::finish_second(second_slice_sum(stats, second_warp_sums), p, stats);
    }
    return stats;
  }

  // LayerNorm's second reduction over the slice: the squared deviations from the row's mean
  // (stats, finished from the first), summed from the slots in the same lane order.
  __device__ Acc second_slice_sum(const Stats& stats, Acc* warp_sums) {
    static_assert(Row::kReductions == 2, "the row type has a second reduction");
    return fold_slots(
        [&](int s, Acc acc) {
          const XVec v = device::bit_cast<XVec>(x_slots[s * block]);
          return r.second_terms(first + offset_of(s), v, acc, stats);
        },
        warp_sums);
  }

  // One reduction over this thread's slots: each lane's chunks in increasing order (acc =
  // term(slot, acc)), then the lanes folded as the one-lane-per-thread butterfly would pair them
  // (device::folded_row_reduce): every thread of the slice gets the same bits.
  template <typename Term>
  __device__ Acc fold_slots(Term term, Acc* warp_sums) {
    Acc lane_sums[kLanes];
#pragma unroll
    for (int j = 0; j < kLanes; ++j) {
      lane_sums[j] = 0;
#pragma unroll
      for (int i = 0; i < kSlots / kLanes; ++i) {
        const int s = i * kLanes + j;
        if (mine[s]) lane_sums[j] = term(s, lane_sums[j]);
      }
    }
    return device::folded_row_reduce<kLanes, typename Row::Statistic>(lane_sums, lanes, warp_sums);
  }

  // The scaled chunks from the slots to the output: the weight's chunks, or ones where the row
  // has no weight, chosen once for the whole loop (with_weight).
  __device__ void store(const Stats& stats) const {
    with_weight(r.weight != nullptr, [&](auto weighted) {
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        if (mine[s]) {
          const XVec v = device::bit_cast<XVec>(x_slots[s * block]);
          if constexpr (decltype(weighted)::value) {
            r.store_normalized(first + offset_of(s), v, weight_of(s), stats);
          } else {
            r.store_normalized(first + offset_of(s), v, Row::ones(), stats);
          }
        }
      }
    });
  }

  // Chunk s's weight, wherever it waits. Precondition: the row has a weight.
  __device__ WVec weight_of(int s) const {
    // s is a constant of the unrolled store loop, so this branch is decided at compile time.
    if (s >= kHeldSlots) return r.load_given_weight(first + offset_of(s));
    const int held = s < kWeightRegs ? s : 0;  // s, in bounds on every path the compiler sees
    if constexpr (kRawW) {
      return device::unpack<WVec>(raw_w[held]);
    } else {
      return w[held];
    }
  }
};

template <typename T, typename W, typename Op>
__global__ void __launch_bounds__(kTileMaxThreads,
                                  (kTileMinCtasPerSm<T, W, Op, kTileHeldChunks<Op>>))
    norm_tile_kernel(const KernelParams p) {
  using Thread = TileThread<T, W, Op, kTileHeldChunks<Op>>;
  using Acc = typename Thread::Acc;
  extern __shared__ uint4 slots[];
  __shared__ alignas(16) Acc warp_sums[kTileMaxThreads * kTileLanesPerThread / 32];
  // LayerNorm's second reduction's own (unused, and not allocated, for RMSNorm rows).
  __shared__ alignas(16) Acc second_warp_sums[Thread::Row::kReductions == 2
                                                  ? kTileMaxThreads * kTileLanesPerThread / 32
                                                  : 1];
  static_assert(Thread::Row::kReductions <= kTileMaxReductions, "one warp-sum buffer each");
  static_assert(sizeof(warp_sums) + sizeof(second_warp_sums) <= kTileStaticSmemBytes,
                "the planner counts these bytes");

  // Addresses first (parameters and indices only), then begin_rows's wait, then the loads: with
  // PDL the address work overlaps the preceding kernel (as in norm_kernel).
  const int lanes = p.threads_per_row;              // a power of two >= 32 * kTileLanesPerThread
  const int threads = lanes / kTileLanesPerThread;  // this CTA's threads per row, whole warps
  const int64_t row = int64_t{blockIdx.x} * p.rows_per_cta + (threadIdx.x >> (__ffs(threads) - 1));
  // Threads past the last row still take part in the reduction (full-warp shuffles, barrier).
  const bool active = row < p.rows;
  const typename Thread::Row r(p, row, active);
  Thread thread(r, threadIdx.x & (threads - 1), lanes, 0, static_cast<int>(p.chunks_per_row),
                active, slots);
  begin_rows<W, true>(p);
  thread.issue();
  const typename Thread::Stats stats = thread.row_stats(p, warp_sums, second_warp_sums);
  Thread::Row::save_stats(p, row, active && (threadIdx.x & (threads - 1)) == 0, stats);
  thread.store(stats);
}

}  // namespace oink
