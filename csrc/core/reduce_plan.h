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
  int64_t grid = 0;       // CTAs
};

// One CUDA kernel of the family: instantiated for every op (up to its max_chunks) and every
// dtype, float16, bfloat16 and float32.
struct ReduceKernel {
  ReduceVariant variant;
  bool vector_io;
  int chunks_per_thread;  // 0 for kLooped
};

// clang-format off
inline constexpr ReduceKernel kReduceKernels[] = {
    {ReduceVariant::kRegisters, true,  1},
    {ReduceVariant::kRegisters, true,  2},
    {ReduceVariant::kRegisters, true,  4},
    {ReduceVariant::kRegisters, false, 1},
    {ReduceVariant::kRegisters, false, 2},
    {ReduceVariant::kRegisters, false, 4},
    {ReduceVariant::kLooped,    true,  0},
    {ReduceVariant::kLooped,    false, 0},
};
// clang-format on

inline constexpr int kReduceMaxThreadsPerRow = 1024;
// The looped schedule's CTA (one row each).
inline constexpr int kReduceLoopedThreads = 512;

// The entry of kReduceKernels a CUDA plan launches, or -1.
int reduce_kernel_entry(const ReducePlan& plan);

// The plan for `problem` on `device` (DeviceInfo{} for the CPU).
ReducePlan make_reduce_plan(const ReduceProblem& problem, const DeviceInfo& device);

// "" when `plan` may launch for `problem`; otherwise the broken invariant. make_reduce_plan()
// never returns a plan with a violation.
std::string reduce_plan_violation(const ReducePlan& plan, const ReduceProblem& problem);

// One line: "softmax registers vector chunks=2 threads/row=256 rows/cta=1 grid=4096".
std::string describe(const ReducePlan& plan, const ReduceProblem& problem);

}  // namespace oink
