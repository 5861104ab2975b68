// Asynchronous memory primitives: per-thread 16-byte global->shared copies (cp.async, sm_80+),
// an L2 prefetch of a whole buffer (sm_90+), an L1 prefetch of a line, programmatic dependent
// launch (sm_90+), and thread block cluster barriers and distributed shared memory (sm_90+).
// The only place with inline PTX. Below sm_90 the PDL and prefetch instructions compile to
// nothing, which is correct: the planner never asks for PDL there, and a prefetch is only a hint;
// the cluster primitives trap there (the planner never plans a cluster below sm_90).
#pragma once

#include <cstdint>

namespace oink::device {

// Starts a 16-byte copy global -> shared that only the issuing thread will read back (after
// async_wait). .cg: cached in L2 only, the rows are streamed once.
__device__ __forceinline__ void async_copy16(void* smem, const void* gmem) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

// The same, to a shared-memory address already converted (__cvta_generic_to_shared): a loop that
// issues copies every row then carries 32-bit addresses instead of converting pointers each time.
__device__ __forceinline__ void async_copy16(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem) : "memory");
}

// async_copy16(smem, gmem) where `pred` holds, else nothing: one predicated instruction, not a
// copy inside `if (pred)`. Inside such blocks the compiler worked out each copy's 64-bit address
// apart, in its own block (five instructions a copy, and the row's base reloaded each time),
// where one base and immediate offsets do (SASS of the tile and cluster kernels, sm_90a).
__device__ __forceinline__ void async_copy16_if(bool pred, uint32_t smem, const void* gmem) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %0, 0;\n\t"
      "@p cp.async.cg.shared.global [%1], [%2], 16;\n\t}" ::"r"(static_cast<int>(pred)),
      "r"(smem), "l"(gmem)
      : "memory");
}

// Closes the current group of async copies (an empty group is fine and keeps counts uniform).
__device__ __forceinline__ void async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most `pending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void async_wait_dynamic(int pending) {
  switch (pending) {
    case 0:
      async_wait<0>();
      break;
    case 1:
      async_wait<1>();
      break;
    case 2:
      async_wait<2>();
      break;
    default:
      async_wait<3>();
      break;
  }
}

// Asks the L2 to fetch `bytes` (a multiple of 16) at `gmem` (16-byte aligned). Fire and forget:
// no data reaches the thread, so it may be issued before griddepcontrol.wait: the L2 is the
// point of coherence, a line a preceding kernel writes later is updated there.
__device__ __forceinline__ void prefetch_l2(const void* gmem, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(gmem), "r"(bytes) : "memory");
#else
  (void)gmem;
  (void)bytes;
#endif
}

// Asks this SM's L1 for the line holding `gmem`: a later ordinary load of it then hits L1
// instead of waiting on L2 or HBM, with no register held in between. A hint, never a fault.
__device__ __forceinline__ void prefetch_l1(const void* gmem) {
  asm volatile("prefetch.global.L1 [%0];\n" ::"l"(gmem));
}

// Programmatic dependent launch. wait: blocks until the grids this launch depends on have
// completed and their memory is visible (a no-op when launched without the PDL attribute).
// launch_dependents: lets the next PDL launch in the stream start its CTAs now; they still wait
// for this grid's completion before touching memory.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Thread block clusters. Every thread of every CTA of the cluster calls each barrier function
// (the .aligned forms), in the same order.
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
#else
  __trap();
#endif
  return rank;
}

// The cluster's index in the grid (x) and its number of CTAs: special registers, read instead of
// dividing blockIdx.x by the cluster size (a division by a runtime value is ~25 instructions).
__device__ __forceinline__ uint32_t cluster_index() {
  uint32_t index = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("mov.u32 %0, %%clusterid.x;\n" : "=r"(index));
#else
  __trap();
#endif
  return index;
}

__device__ __forceinline__ uint32_t cluster_ctas() {
  uint32_t ctas = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(ctas));
#else
  __trap();
#endif
  return ctas;
}

// Arrives on the cluster barrier without ordering memory: paired with cluster_wait() later, it
// tells that every CTA of the cluster has started (so its shared memory may be written), while
// this thread goes on in between.
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// A full cluster barrier (arrive, then wait with acquire) whose arrival orders memory only for the
// warps that `release` (a warp-uniform choice): those whose writes into other CTAs' shared memory
// must be visible to every thread of the cluster after it. The others arrive relaxed: on sm_90a a
// release arrival is a MEMBAR.ALL.GPU, which waits for every memory operation the warp has in
// flight (a fused row's residual stores among them).
__device__ __forceinline__ void cluster_sync_released_by(bool release) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (release) {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  } else {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  }
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  (void)release;
  __trap();
#endif
}

// Writes `value` to the variable at `local` (this CTA's shared memory) in CTA `rank` of the
// cluster: the same variable in that CTA's shared memory (distributed shared memory). One store
// of its bits: a float or a double, or a pair of them (device::Pair, aligned to its size).
template <typename V>
__device__ __forceinline__ void store_to_cluster_rank(V* local, uint32_t rank, V value) {
  static_assert(sizeof(V) == 4 || sizeof(V) == 8 || sizeof(V) == 16, "one, two or four words");
  static_assert(alignof(V) == sizeof(V), "aligned to its size: one store");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(local));
  uint32_t remote = 0;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(address), "r"(rank));
  if constexpr (sizeof(V) == 4) {
    uint32_t bits;
    __builtin_memcpy(&bits, &value, 4);
    asm volatile("st.shared::cluster.u32 [%0], %1;\n" ::"r"(remote), "r"(bits) : "memory");
  } else if constexpr (sizeof(V) == 8) {
    uint64_t bits;
    __builtin_memcpy(&bits, &value, 8);
    asm volatile("st.shared::cluster.u64 [%0], %1;\n" ::"r"(remote), "l"(bits) : "memory");
  } else {
    uint64_t bits[2];
    __builtin_memcpy(bits, &value, 16);
    asm volatile("st.shared::cluster.v2.u64 [%0], {%1, %2};\n" ::"r"(remote), "l"(bits[0]),
                 "l"(bits[1])
                 : "memory");
  }
#else
  (void)local;
  (void)rank;
  (void)value;
  __trap();
#endif
}

}  // namespace oink::device
