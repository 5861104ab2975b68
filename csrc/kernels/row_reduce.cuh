// The two schedules of the reduce-then-map row ops (core/row_reduce.h), generic over a row type
// (kernels/softmax_row.cuh, kernels/cross_entropy_row.cuh) that says what a row reads, the
// statistic each thread folds, the policy that combines them (device/reduce.cuh) and what the row
// writes:
//
//   reduce_registers_kernel  a row's threads_per_row threads hold it in registers (kChunks 16-byte
//                            chunks per stream each): read once, written once.
//   reduce_cluster_kernel    a thread block cluster per row (sm_90+), for written rows too long
//                            for registers: each CTA stages its slice (kReduceClusterChunks chunks
//                            a thread) in shared memory, the CTAs' values meet in distributed
//                            shared memory, then each CTA writes its slice: read once, written
//                            once.
//   reduce_looped_kernel     one CTA of kReduceLoopedThreads threads per row, for the rows no other
//                            schedule takes: pass 1 folds the row, pass 2 re-reads (from L2 where
//                            the row stayed) and writes. Rows that need no reduction have pass 2
//                            only.
//
// Ownership (core/reduce_plan.h): chunk c of a row belongs to thread c % threads_per_row, which
// folds its chunks in increasing order, element by element; the threads combine in
// device::row_reduce's fixed tree (in the cluster: chunk c of slice c / S, thread c % T of that
// slice's CTA of T threads, S = T * kReduceClusterChunks, and the slices' values combined in slice
// order, or by a butterfly for the online softmax's policies: device::butterfly_over).
// Vector or element-wise I/O and rows_per_cta change only where the bytes come from, never the
// arithmetic, so a row's bits depend on (op, dtype, N) and its values alone.
//
// A row type Row provides:
//   kOp, kStreams (1 or 2), kReduces, kWrites, kReadsAcross (a thread reads an element another
//   thread of the row may overwrite in place: it needs a barrier before the stores);
//   optionally kMayIdle = true and idle()        a row without a reduction that may have nothing
//                                             to do: the same answer for every thread of the
//                                             grid, which then returns before its loads
//   using Io (ChunkIo below), Policy (with kReduces), Stats;
//   Row(params, row, active)                  per-row values (targets, lse ...) are read here
//   in[kStreams], out, n                      the row's streams and its columns
//   after_loads(leader)                       loads that depend on the per-row values
//   thread_value(chunks)                      registers: the thread's Value over its chunks;
//                                             chunks(f) calls f(floats[kStreams], col) for each,
//                                             in increasing order
//   add_chunk(value, floats, col)             looped: one more chunk folded into the thread's Value
//   finish(total) / finish()                  the row's Stats from the row's Value (or without one)
//   save(params, row, stats, leader)          per-row outputs (the row's lane 0 writes them)
//   store(floats, col, stats)                 one chunk's outputs
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/reduce_plan.h"
#include "core/rows.h"
#include "device/async.cuh"
#include "device/reduce.cuh"
#include "device/vec.cuh"

namespace oink {

// One launch's parameters (kernels/row_reduce.cu fills them from the plan, problem and args).
struct ReduceParams {
  const void* in;
  const void* in2;
  void* out;
  int64_t rows, cols;
  int64_t chunks_per_row;  // ceil(cols / chunk elements)
  int threads_per_row, rows_per_cta;
  RowIndexer index;
  RowStrides in_strides, in2_strides, out_strides;
  // Cross-entropy (core/row_reduce.h, ReduceArgs).
  const int64_t* target;
  int64_t ignore_index;
  float keep;         // 1 - eps (label smoothing), else 1
  float spread;       // eps / V, rounded once from float64 (label smoothing), else 0
  float softcap;      // c (softcap)
  float inv_softcap;  // 1 / c: z = c * tanh(x * (1 / c)), a multiply instead of a division
  float* loss;
  float* lse;
  const float* dloss;
  const void* grad_scale;         // float32, or T where grad_scale_in_rows_dtype (ReduceArgs)
  bool grad_scale_in_rows_dtype;  // scale_gradient_ only
};

// *p.grad_scale as a float (1 where there is none: the fused gradient of a sum).
template <typename T>
__device__ __forceinline__ float grad_scale_of(const ReduceParams& p) {
  if (p.grad_scale == nullptr) return 1.f;
  return p.grad_scale_in_rows_dtype ? device::to_float(*static_cast<const T*>(p.grad_scale))
                                    : *static_cast<const float*>(p.grad_scale);
}

// Where row `row` of each stream starts (elements), for the row types' constructors.
struct ReduceRowOffsets {
  int64_t in, in2, out;
};

__device__ __forceinline__ ReduceRowOffsets reduce_row_offsets(const ReduceParams& p, int64_t row) {
  const RowIndex at = split_row(p.index, row);
  return {row_offset(p.index, at, p.in_strides), row_offset(p.index, at, p.in2_strides),
          row_offset(p.index, at, p.out_strides)};
}

// A row stream's 16-byte chunks, held as raw words until used (device::Raw says why; element by
// element, 16-bit values packed two to a register: held as one float each, the element-wise
// cross-entropy instantiations of 4 chunks spilled, ptxas sm_90a). kVector: whole, aligned,
// in-bounds chunks (the plan guarantees it), one predicated vector load each (load_raw_if).
// Otherwise element by element: columns >= n are masked (valid() is false: the row types skip
// them in their statistics) and never stored.
template <typename T, bool kVector>
struct ChunkIo {
  static constexpr int kElems = 16 / sizeof(T);
  using TVec = device::Vec<T, kElems>;
  using Floats = device::Vec<float, kElems>;
  using Held = device::Raw<TVec>;

  // `pred` false: nothing is read (the result is unspecified and never used).
  __device__ __forceinline__ static Held load(bool pred, const T* row, int64_t col, int64_t n) {
    if constexpr (kVector) {
      return device::load_raw_if<TVec>(pred, row + col);
    } else {
      // Columns past the end read the last element (masked later): one condition per chunk, not
      // one branch per element.
      TVec v;
      if (pred) {
        const T* last = row + (n - 1);
#pragma unroll
        for (int e = 0; e < kElems; ++e) v.v[e] = *(e < n - col ? row + col + e : last);
      }
      return device::bit_cast<Held>(v);
    }
  }
  __device__ __forceinline__ static Floats floats(const Held& held) {
    return device::to_floats(device::unpack<TVec>(held));
  }
  __device__ __forceinline__ static bool valid(int64_t col, int e, int64_t n) {
    return kVector || e < n - col;
  }
  __device__ __forceinline__ static void store(T* row, int64_t col, int64_t n, const Floats& f) {
    TVec v;
#pragma unroll
    for (int e = 0; e < kElems; ++e) v.v[e] = device::from_float<T>(f.v[e]);
    device::store_chunk<kVector, T, kElems>(row, col, n, v);
  }
};

// Row::kMayIdle where the row type declares it, else false.
template <typename Row, typename = void>
struct MayIdle : std::false_type {};
template <typename Row>
struct MayIdle<Row, std::void_t<decltype(Row::kMayIdle)>> : std::bool_constant<Row::kMayIdle> {};

// Warp values of one CTA's rows (device::row_reduce): one per warp, 16-byte aligned.
template <typename Row>
struct WarpValues {
  using Value = typename Row::Policy::Value;
  alignas(16) Value v[kReduceMaxThreadsPerRow / 32];
};
template <typename Row>
struct NoWarpValues {
  int unused;
};
template <typename Row>
using WarpValuesOf = std::conditional_t<Row::kReduces, WarpValues<Row>, NoWarpValues<Row>>;

// row_in_registers. Block: threads_per_row * rows_per_cta threads (a multiple of 32: full-warp
// shuffles); thread t is lane t % threads_per_row of row blockIdx.x * rows_per_cta + t /
// threads_per_row, and holds chunks lane + k * threads_per_row, k < kChunks, of every stream.
// Threads past the last row load nothing but still take part in the shuffles and the barrier.
template <typename Row, bool kVector, int kChunks>
__global__ void __launch_bounds__(kReduceMaxThreadsPerRow, 1)
    reduce_registers_kernel(const ReduceParams p) {
  using Io = typename Row::Io;
  using Floats = typename Io::Floats;
  constexpr int kStreams = Row::kStreams;
  __shared__ WarpValuesOf<Row> warp_values;

  // threads_per_row is a power of two: a mask and a shift, not a division.
  const int tpr = p.threads_per_row;
  const int lane = threadIdx.x & (tpr - 1);
  const int64_t row = int64_t{blockIdx.x} * p.rows_per_cta + (threadIdx.x >> (__ffs(tpr) - 1));
  const bool active = row < p.rows;
  Row r(p, row, active);
  if constexpr (MayIdle<Row>::value) {
    static_assert(!Row::kReduces, "an idle CTA leaves no barrier or shuffle waiting");
    if (r.idle()) return;
  }

  // A chunk's column is recomputed where used, in 32 bits: a registers row has at most
  // kReduceMaxThreadsPerRow * kChunks <= 4096 chunks, < 2^15 columns. Held as kChunks 64-bit
  // values, or computed in 64 bits, the element-wise float16 cross-entropy kernels of 4 chunks
  // spilled (ptxas sm_90a).
  const auto col = [&](int k) { return int64_t{(lane + k * tpr) * Io::kElems}; };
  bool mine[kChunks];
#pragma unroll
  for (int k = 0; k < kChunks; ++k) mine[k] = active && lane + int64_t{k} * tpr < p.chunks_per_row;
  // Every load of every stream is issued before any value is used (a use between two loads makes
  // the second wait for the first).
  typename Io::Held held[kStreams][kChunks];
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
#pragma unroll
    for (int s = 0; s < kStreams; ++s) held[s][k] = Io::load(mine[k], r.in[s], col(k), r.n);
  }
  r.after_loads(active && lane == 0);

  const auto chunks = [&](auto&& f) {
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      if (mine[k]) {
        Floats xs[kStreams];
#pragma unroll
        for (int s = 0; s < kStreams; ++s) xs[s] = Io::floats(held[s][k]);
        f(xs, col(k));
      }
    }
  };
  typename Row::Stats stats;
  if constexpr (Row::kReduces) {
    using Policy = typename Row::Policy;
    stats = r.finish(device::row_reduce<Policy>(r.thread_value(chunks), tpr, warp_values.v));
  } else {
    stats = r.finish();
  }
  // Rows of a warp or less reduce by shuffles alone, which order no memory: the element another
  // thread read (after_loads) must be read before this thread overwrites it in place.
  if constexpr (Row::kReadsAcross) __syncwarp();
  r.save(p, row, stats, active && lane == 0);
  if constexpr (Row::kWrites) {
    chunks([&](const Floats* xs, int64_t c) { r.store(xs, c, stats); });
  }
}

// cluster. Grid: rows x cluster_ctas CTAs of kThreads threads, one cluster of cluster_ctas CTAs
// per row (a 1-D grid of clusters); CTA `rank` takes slice `rank`: chunks [rank * kSlice, ...),
// thread t chunks t, t + kThreads, ... of it (kReduceClusterChunks at most). Every chunk of every
// stream is staged in shared memory: whole 16-byte chunks all at once by cp.async (kSlice * 16
// bytes a stream in flight per CTA, with no registers held), other rows element by element, two
// chunks a thread at a time, through registers; then
// the thread folds its chunks, the CTA combines its threads (row_reduce), each CTA sends its value
// to every CTA's slice_values[rank], one cluster barrier, and every CTA combines the slices' values
// in the same fixed order (the policy's: in slice order, or by a butterfly; the same bits in every
// CTA), and writes its own slice from shared memory.
//
// The exchange follows norm_cluster_kernel's: the first cluster barrier, arrived on at the start
// and waited for just before the sends, tells that every CTA has started; the second is released
// by the warps that sent (warp 0 of each CTA; it also holds the row's leader, whose read of an
// element another CTA overwrites in place, after_loads, is so ordered before those stores) and
// acquired by every thread; no CTA leaves before it, so no send lands in a CTA that has exited.
template <typename Row, bool kVector, int kThreads>
__global__ void __launch_bounds__(kThreads) reduce_cluster_kernel(const ReduceParams p) {
  using Io = typename Row::Io;
  using Floats = typename Io::Floats;
  using Policy = typename Row::Policy;
  using Value = typename Policy::Value;
  constexpr int kStreams = Row::kStreams;
  constexpr int kChunks = kReduceClusterChunks;
  constexpr int kSlice = reduce_slice_chunks(kThreads);
  static_assert(Row::kReduces, "the cluster exists to combine a row's slices");
  static_assert(sizeof(typename Io::Held) == sizeof(uint4), "a staged chunk is 16 bytes");
  extern __shared__ uint4 staged[];  // [kStreams][kSlice]: reduce_cluster_smem_bytes
  __shared__ WarpValues<Row> warp_values;
  __shared__ Value slice_values[kReduceMaxClusterCtas];
  static_assert(sizeof(warp_values) + sizeof(slice_values) <= kReduceClusterStaticSmemBytes,
                "the planner counts these bytes");
  device::cluster_arrive_relaxed();

  const int t = static_cast<int>(threadIdx.x);
  const int rank = static_cast<int>(device::cluster_rank());
  const int ctas = static_cast<int>(device::cluster_ctas());
  const int64_t row = device::cluster_index();
  Row r(p, row, true);
  const int64_t first = int64_t{rank} * kSlice;  // the slice's first chunk
  const auto col = [&](int k) { return (first + t + k * kThreads) * Io::kElems; };
  const auto slot = [&](int s, int k) { return s * kSlice + t + k * kThreads; };
  bool mine[kChunks];
#pragma unroll
  for (int k = 0; k < kChunks; ++k) mine[k] = first + t + k * kThreads < p.chunks_per_row;
  if constexpr (kVector) {
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
#pragma unroll
      for (int s = 0; s < kStreams; ++s) {
        device::async_copy16_if(
            mine[k], static_cast<uint32_t>(__cvta_generic_to_shared(&staged[slot(s, k)])),
            r.in[s] + col(k));
      }
    }
    device::async_commit();
    device::async_wait<0>();  // this thread's copies: it alone reads them back
  } else {
    // Element by element, two chunks at a time: all of a thread's elements loaded at once held
    // 64 values live and spilled at 512 threads (ptxas, a non-Hopper target of the release build).
#pragma unroll 2
    for (int k = 0; k < kChunks; ++k) {
      const bool in_row = first + t + k * kThreads < p.chunks_per_row;
#pragma unroll
      for (int s = 0; s < kStreams; ++s) {
        const typename Io::Held held = Io::load(in_row, r.in[s], col(k), r.n);
        if (in_row) staged[slot(s, k)] = device::bit_cast<uint4>(held);
      }
    }
  }
  r.after_loads(rank == 0 && t == 0);

  const auto chunks = [&](auto&& f) {
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      if (mine[k]) {
        Floats xs[kStreams];
#pragma unroll
        for (int s = 0; s < kStreams; ++s) {
          xs[s] = Io::floats(device::bit_cast<typename Io::Held>(staged[slot(s, k)]));
        }
        f(xs, col(k));
      }
    }
  };
  const Value slice_value =
      device::row_reduce<Policy>(r.thread_value(chunks), kThreads, warp_values.v);
  device::cluster_wait();  // every CTA of the cluster has started
  static_assert(kReduceMaxClusterCtas <= 32, "the senders (t < ctas) are warp 0");
  if (t < ctas) device::store_to_cluster_rank(&slice_values[rank], t, slice_value);
  device::cluster_sync_released_by(t < 32);
  Value total;
  if constexpr (device::ButterflyAcross<Policy>::value) {
    total = device::butterfly_over<Policy>(slice_values, ctas);
  } else {
    total = slice_values[0];
    for (int k = 1; k < ctas; ++k) total = Policy::combine(total, slice_values[k]);
  }
  const typename Row::Stats stats = r.finish(total);
  r.save(p, row, stats, rank == 0 && t == 0);
  if constexpr (Row::kWrites) {
    chunks([&](const Floats* xs, int64_t c) { r.store(xs, c, stats); });
  }
}

// Chunks a looped thread loads before it uses any: 4 chunks of each stream in flight a thread.
inline constexpr int kReduceLoopedBatch = 4;

// looped. Grid: one CTA of kReduceLoopedThreads threads per row; thread t takes chunks t, t + 512,
// ... in increasing order, kReduceLoopedBatch of them loaded at a time. Pass 1 folds them
// (add_chunk), the row's threads combine (row_reduce, one barrier), pass 2 re-reads and stores.
template <typename Row, bool kVector>
__global__ void __launch_bounds__(kReduceLoopedThreads) reduce_looped_kernel(const ReduceParams p) {
  using Io = typename Row::Io;
  using Floats = typename Io::Floats;
  constexpr int kStreams = Row::kStreams;
  constexpr int kThreads = kReduceLoopedThreads;
  constexpr int kBatch = kReduceLoopedBatch;
  __shared__ WarpValuesOf<Row> warp_values;

  const int64_t row = blockIdx.x;
  if (row >= p.rows) return;  // the whole CTA: no barrier is left waiting
  const int lane = threadIdx.x;
  Row r(p, row, true);
  if constexpr (MayIdle<Row>::value) {
    static_assert(!Row::kReduces, "an idle CTA leaves no barrier waiting");
    if (r.idle()) return;
  }
  const int64_t chunks = p.chunks_per_row;

  // f(floats[kStreams], col) for each of this thread's chunks, in increasing order.
  const auto sweep = [&](auto&& f) {
    for (int64_t base = lane; base < chunks; base += int64_t{kBatch} * kThreads) {
      bool mine[kBatch];
      typename Io::Held held[kStreams][kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        mine[j] = base + int64_t{j} * kThreads < chunks;
        const int64_t col = (base + int64_t{j} * kThreads) * Io::kElems;
#pragma unroll
        for (int s = 0; s < kStreams; ++s) held[s][j] = Io::load(mine[j], r.in[s], col, r.n);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (mine[j]) {
          Floats xs[kStreams];
#pragma unroll
          for (int s = 0; s < kStreams; ++s) xs[s] = Io::floats(held[s][j]);
          f(xs, (base + int64_t{j} * kThreads) * Io::kElems);
        }
      }
    }
  };

  typename Row::Stats stats;
  if constexpr (Row::kReduces) {
    using Policy = typename Row::Policy;
    typename Policy::Value v = Policy::identity();
    sweep([&](const Floats* xs, int64_t col) { v = r.add_chunk(v, xs, col); });
    // After pass 1's loads (not ahead of them, behind the wait for the target), before the
    // barrier, which orders it before every store of pass 2.
    r.after_loads(lane == 0);
    stats = r.finish(device::row_reduce<Policy>(v, kThreads, warp_values.v));
  } else {
    static_assert(!Row::kReadsAcross, "a row without a reduction has no barrier");
    r.after_loads(lane == 0);
    stats = r.finish();
  }
  r.save(p, row, stats, lane == 0);
  if constexpr (Row::kWrites) {
    sweep([&](const Floats* xs, int64_t col) { r.store(xs, col, stats); });
  }
}

}  // namespace oink
