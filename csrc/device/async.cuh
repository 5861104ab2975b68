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

// A transaction barrier (mbarrier) in this CTA's shared memory: it completes its phase when its
// arrivals have arrived and the bytes they announced (expect_tx) have landed, which the peers
// of the cluster credit with each store_async_to_cluster_rank. One phase per launch here
// (parity 0).
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const auto b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(b), "r"(arrivals) : "memory");
  // Peers write to it after the cluster barrier that follows: make the initialised barrier
  // visible to them first.
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  (void)bar;
  (void)arrivals;
  __trap();
#endif
}

// One arrival on `bar` that announces `bytes` still to come from peers' asynchronous stores.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const auto b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(bytes)
               : "memory");
#else
  (void)bar;
  (void)bytes;
  __trap();
#endif
}

// Waits until `bar` has completed the phase of parity `parity`; the bytes its peers stored are
// then visible to this thread.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const auto b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(b),
      "r"(parity)
      : "memory");
#else
  (void)bar;
  (void)parity;
  __trap();
#endif
}

// Stores `value` to the variable at `local` (this CTA's shared memory) in CTA `rank` of the
// cluster, asynchronously, crediting its bytes to the mbarrier at `local_bar` in that CTA (the
// same variables in that CTA's shared memory: distributed shared memory). No barrier is needed
// after it: the receiver waits on its mbarrier for exactly these bytes.
template <typename V>
__device__ __forceinline__ void store_async_to_cluster_rank(V* local, uint64_t* local_bar,
                                                            uint32_t rank, V value) {
  static_assert(sizeof(V) == 4 || sizeof(V) == 8, "a float or a double");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(local));
  const auto bar = static_cast<uint32_t>(__cvta_generic_to_shared(local_bar));
  uint32_t remote = 0, remote_bar = 0;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(address), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote_bar) : "r"(bar), "r"(rank));
  if constexpr (sizeof(V) == 4) {
    asm volatile(
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(remote),
        "r"(__float_as_uint(value)), "r"(remote_bar)
        : "memory");
  } else {
    asm volatile(
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];\n" ::"r"(remote),
        "l"(__double_as_longlong(value)), "r"(remote_bar)
        : "memory");
  }
#else
  (void)local;
  (void)local_bar;
  (void)rank;
  (void)value;
  __trap();
#endif
}

}  // namespace oink::device
