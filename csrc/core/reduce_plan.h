// The launch plan of a reduce-then-map row op (core/row_reduce.h): a pure function of the
// problem and the device, testable on any machine, and the table of CUDA kernels the dispatch
// instantiates (kernels/row_reduce.cu), which the plan's checks hold it to.
//
// Batch invariance: a row's reduction order depends on (op, dtype, N) alone. The variant, the
// chunks a thread holds and threads_per_row are functions of those (never of M, the strides or
// the alignment); a row is cut into 16-byte chunks (8 elements of a 16-bit type, 4 of float32),
// chunk c belongs to thread c % threads_per_row of the row, each thread combines its chunks in
// increasing order, element by element, and the threads combine in the fixed tree of
// device/reduce.cuh. Vector or element-wise I/O and rows_per_cta change speed, never the bits.
#pragma once

#include <cstdint>
#include <string>

#include "core/problem.h"
#include "core/row_reduce.h"

namespace oink {

enum class ReduceVariant : uint8_t {
  kCpu,        // host loop
  kRegisters,  // CUDA: threads_per_row threads hold the row in registers: read once, written once
  kCluster,    // CUDA (sm_90+): a cluster of CTAs per row, a slice each staged in shared memory;
               // the slices' values meet in distributed shared memory: read once, written once
  kLooped,     // CUDA: one CTA per row loops over it: pass 1 reduces, pass 2 re-reads and writes
};

const char* reduce_variant_name(ReduceVariant v);

struct ReducePlan {
  ReduceVariant variant = ReduceVariant::kCpu;
  bool vector_io = false;     // whole 16-byte chunks (aligned rows, N a multiple of a chunk)
  int chunk_elems = 8;        // elements of a chunk: 16 / sizeof(element)
  int chunks_per_thread = 0;  // kRegisters: the chunks of each stream a thread holds (1, 2, 4)
  int threads_per_row = 0;    // a power of two, <= 1024
  int rows_per_cta = 1;
  int block_threads = 0;  // threads_per_row * rows_per_cta
  int cluster_ctas = 0;   // kCluster: CTAs a row (slices of reduce_slice_chunks()), else 0
  int smem_bytes = 0;     // dynamic shared memory a CTA (kCluster: the staged slice)
  int64_t grid = 0;       // CTAs
};

// One CUDA kernel of the family: instantiated for every op (registers: up to its max_chunks;
// cluster: the reducing ops) and every dtype, float16, bfloat16 and float32.
struct ReduceKernel {
  ReduceVariant variant;
  bool vector_io;
  int chunks_per_thread;  // 0 for kCluster (kReduceClusterChunks, in shared memory) and kLooped
  int cta_threads;        // kCluster: its CTA's threads (a template argument); else 0
};

// clang-format off
inline constexpr ReduceKernel kReduceKernels[] = {
    {ReduceVariant::kRegisters, true,  1, 0},
    {ReduceVariant::kRegisters, true,  2, 0},
    {ReduceVariant::kRegisters, true,  4, 0},
    {ReduceVariant::kRegisters, false, 1, 0},
    {ReduceVariant::kRegisters, false, 2, 0},
    {ReduceVariant::kRegisters, false, 4, 0},
    {ReduceVariant::kCluster,   true,  0, 256},
    {ReduceVariant::kCluster,   true,  0, 512},
    {ReduceVariant::kCluster,   false, 0, 256},
    {ReduceVariant::kCluster,   false, 0, 512},
    {ReduceVariant::kLooped,    true,  0, 0},
    {ReduceVariant::kLooped,    false, 0, 0},
};
// clang-format on

inline constexpr int kReduceMaxThreadsPerRow = 1024;
// The looped schedule's CTA (one row each).
inline constexpr int kReduceLoopedThreads = 512;
// The cluster schedule: a written row of more chunks than registers hold is cut into slices of
// kReduceClusterChunks chunks a thread (the last slice may be shorter), one per CTA of a cluster
// of at most kReduceMaxClusterCtas (the portable size): CTAs of 256 threads (2048-chunk slices,
// 32 KiB a stream) up to 8 slices, then of 512 (64 KiB): rows up to 32768 chunks, N = 262144 at
// 16 bits, 131072 at float32. Staged in shared memory, a slice holds no registers while its
// loads are in flight. (Clusters of 10 and 16 CTAs of 256 ran the fused cross-entropy at 82% of
// the copy ceiling where 8 ran it at 93%: H100, bf16, V=151936 and 256000 against 128256.)
inline constexpr int kReduceClusterChunks = 8;
inline constexpr int kReduceClusterThreads[] = {256, 512};
inline constexpr int kReduceMaxClusterCtas = 8;
// Static shared memory of the cluster kernel: the warp values of a row of up to 1024 threads and
// the slices' values, 16 bytes each at most (kernels/row_reduce.cuh static_asserts it).
inline constexpr int kReduceClusterStaticSmemBytes =
    (kReduceMaxThreadsPerRow / 32 + kReduceMaxClusterCtas) * 16;
// A cluster CTA's slice, in chunks, and its dynamic shared memory: every stream's slice.
constexpr int reduce_slice_chunks(int cta_threads) { return cta_threads * kReduceClusterChunks; }
constexpr int reduce_cluster_smem_bytes(int streams, int cta_threads) {
  return streams * reduce_slice_chunks(cta_threads) * 16;
}

// The entry of kReduceKernels a CUDA plan launches, or -1.
int reduce_kernel_entry(const ReducePlan& plan);

// The plan for `problem` on `device` (DeviceInfo{} for the CPU).
ReducePlan make_reduce_plan(const ReduceProblem& problem, const DeviceInfo& device);

// "" when `plan` may launch for `problem`; otherwise the broken invariant. make_reduce_plan()
// never returns a plan with a violation.
std::string reduce_plan_violation(const ReducePlan& plan, const ReduceProblem& problem);

// One line: "softmax registers vector chunks=2 threads/row=256 rows/cta=1 grid=4096" (a cluster
// plan adds "cluster=8 smem=32768").
std::string describe(const ReducePlan& plan, const ReduceProblem& problem);

}  // namespace oink
