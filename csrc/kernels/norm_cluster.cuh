// The `cluster` schedule, for rows longer than one slice (kSliceChunks chunks: 16384 elements of a
// 16-bit type, 8192 of float32): a thread block cluster per row, one CTA per slice (two per CTA
// past kMaxClusterCtas slices), at every batch size.
//
// Why (docs/kernels.md, "cluster"): one long row on one CTA is a chain of dependent round trips
// (two_pass: ~12 for N=131072, 14 us against a copy's 3-4); split over a cluster, every slice is
// read at once by its own SM, the slices' sums meet in distributed shared memory, and each CTA
// scales its own slice: one DRAM round trip, one exchange, one store.
//
// LayerNorm's rows take two exchanges: the slices' sums (the mean), then their sums of squared
// deviations from that mean, each added in slice order, as the tile adds its lanes.
//
// Each CTA is a tile of its slice (TileThread: 256 threads playing the slice's 1024 lanes, 8
// chunks each, staged in shared memory, the weight in registers as the budget allows), so a slice's
// sum has the bits of a row of that length; the row's sum is the slices' sums added in slice order,
// by every CTA alike, as two_pass adds them. The exchange: each slice's sum is written into every
// CTA's `slice_sums[slice]`, then one cluster barrier makes them visible: released by the warps
// that wrote them only (a release arrival is a MEMBAR.ALL.GPU on sm_90a, waiting for all the
// warp's memory operations; the other warps arrive relaxed: rmsnorm's batches 1.04-1.07x), acquired
// by every thread. The first cluster barrier, arrived on at the start and waited for just before
// those writes, is what tells that every CTA of the cluster has started; no CTA leaves before the
// second barrier, so no write lands in a CTA that has exited. (Sums sent by st.async onto each
// CTA's mbarrier, without the second barrier, and Quack's exchange without the CTA barrier too,
// the slices loaded by one bulk copy each, and persistent clusters keeping two rows in flight,
// were all measured slower: docs/kernels.md, "cluster".)
#pragma once

#include <cstdint>

#include "core/plan.h"
#include "device/async.cuh"
#include "kernels/norm_row.cuh"
#include "kernels/norm_tile.cuh"

namespace oink {

// Registers as the tile's for the weight chunks held (kHeldChunks: NormPlan::weight_held_chunks):
// 16-bit rmsnorm slices at 64 per thread, so that 4 one-slice CTAs (or 2 two-slice ones) share an
// SM (with 1 CTA per SM requested, ptxas took 80 and 3 fit: 8% slower at M >= 1024, H200); 128
// with a float32 weight held whole, 64 with half of it held.
template <typename T, typename W, typename Op, int kHeldChunks>
inline constexpr int kClusterMinCtasPerSm =
    kTileMinCtasPerSm<T, W, Op, kHeldChunks>* kTileMaxThreads / kClusterMaxThreads > 0
        ? kTileMinCtasPerSm<T, W, Op, kHeldChunks>* kTileMaxThreads / kClusterMaxThreads
        : 1;

// A CTA holds blockDim.x / kTileMaxThreads slices (core/plan.cpp, cluster_slices_per_cta: two
// for rows of more than kMaxClusterCtas slices, and for the fused op's large batches; a cluster
// of one CTA when that is the whole row), its thread groups side by side: group g of CTA `rank` is
// slice rank * per_cta + g (a last CTA's second group may have no slice: it loads and stores
// nothing, sends nothing). Each group's lane warps fill their own 32 entries of warp_sums, so the
// groups reduce apart within one barrier, as the tile's row groups do.
template <typename T, typename W, typename Op, int kHeldChunks>
__global__ void __launch_bounds__(kClusterMaxThreads, (kClusterMinCtasPerSm<T, W, Op, kHeldChunks>))
    norm_cluster_kernel(const KernelParams p) {
  using Thread = TileThread<T, W, Op, kHeldChunks>;
  using Row = typename Thread::Row;
  using Acc = typename Thread::Acc;
  constexpr bool kSecond = Row::kReductions == 2;  // LayerNorm: the squared deviations too
  extern __shared__ uint4 slots[];
  __shared__ alignas(16) Acc warp_sums[kClusterMaxThreads * kTileLanesPerThread / 32];
  __shared__ Acc slice_sums[kMaxClusterSlices];
  // The second reduction has buffers of its own: a CTA past the first exchange sends its slice
  // sums while another may still be adding the first's, and the first's lane-warp sums may still
  // be read by a warp whose arrival at the exchange's barrier was relaxed (no order for its loads).
  __shared__ alignas(16) Acc second_warp_sums[kSecond ? sizeof(warp_sums) / sizeof(Acc) : 1];
  __shared__ Acc second_slice_sums[kSecond ? kMaxClusterSlices : 1];
  static_assert(Row::kReductions <= kTileMaxReductions, "one buffer each");
  static_assert(sizeof(warp_sums) + sizeof(slice_sums) + sizeof(second_warp_sums) +
                        sizeof(second_slice_sums) <=
                    kClusterStaticSmemBytes,
                "the planner counts these bytes");
  const int slices = p.slices;  // 2 to kMaxClusterSlices
  device::cluster_arrive_relaxed();

  const int per_cta = static_cast<int>(blockDim.x) / kTileMaxThreads;  // 1 or 2
  const int ctas = static_cast<int>(device::cluster_ctas());           // ceil(slices / per_cta)
  const int t = static_cast<int>(threadIdx.x) % kTileMaxThreads;       // thread in its group
  const int slice = static_cast<int>(device::cluster_rank()) * per_cta +
                    static_cast<int>(threadIdx.x) / kTileMaxThreads;
  const int64_t row = device::cluster_index();  // one cluster per row, a 1-D grid of them
  const Row r(p, row, true);
  const int slice_first = slice * kSliceChunks;
  const int slice_chunks = min(kSliceChunks, static_cast<int>(p.chunks_per_row) - slice_first);
  Thread thread(r, t, kMaxThreadsPerRow, slice_first, slice_chunks, true, slots);
  begin_rows<W, true>(p);  // after the addresses: they overlap the preceding kernel (PDL)
  thread.issue();

  // A reduction's slice sum sent into every CTA's `sums[slice]`, released by the warps that sent
  // them (the first of each slice's threads), the others' arrival relaxed; then the row's sum,
  // the slices' added in slice order.
  static_assert(kMaxClusterCtas <= 32, "a slice's senders (t < ctas) are its first warp");
  auto exchange = [&](Acc* sums, Acc slice_sum) {
    if (t < ctas && slice < slices) device::store_to_cluster_rank(&sums[slice], t, slice_sum);
    device::cluster_sync_released_by(t < 32);
    Acc total = 0;
    for (int k = 0; k < slices; ++k) total += sums[k];
    return total;
  };
  const Acc first_sum = thread.slice_sum(warp_sums);
  device::cluster_wait();  // every CTA of the cluster has started
  typename Row::Stats stats = Row::finish_first(exchange(slice_sums, first_sum), p);
  if constexpr (kSecond) {
    const Acc second_sum = thread.second_slice_sum(stats, second_warp_sums);
    stats = Row::finish_second(exchange(second_slice_sums, second_sum), p, stats);
  }
  // No CTA leaves before the last exchange's barrier, after every send into it.
  Row::save_stats(p, row, slice == 0 && t == 0, stats);
  thread.store(stats);
}

}  // namespace oink
