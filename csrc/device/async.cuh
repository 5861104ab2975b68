// Asynchronous memory primitives: per-thread 16-byte global->shared copies (cp.async, sm_80+),
// an L2 prefetch of a whole buffer (sm_90+), an L1 prefetch of a line, and programmatic
// dependent launch (sm_90+).
// The only place with inline PTX. Below sm_90 the sm_90 instructions compile to nothing, which is
// correct: the planner never asks for PDL there, and a prefetch is only a hint.
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

}  // namespace oink::device
