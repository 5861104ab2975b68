// The backward passes' row blocks (shared by the CPU and CUDA kernels) and the launch plan of
// rmsnorm_backward and layernorm_backward on CUDA: a pure function of the problem, testable on
// any machine.
//
// The weight gradient is a sum over rows. It is summed in fixed row blocks, each block's rows in
// row order into one partial per column, then the blocks' partials in block order: no atomics,
// and the blocks are a function of M, N and the dtype alone (never of the device, the CPU's
// thread count or the run), so the same inputs give the same bits on every run.
//
// On CUDA each block is one CTA of max(backward_threads_per_row(N, dtype), 32) threads, and the
// fastest count is about one wave of them: at most 256 blocks of CTAs up to 256 threads, 128 of
// 512-thread CTAs, blocks of at least 8 rows. H200, bf16, a backward sweep: rmsnorm N=4096
// M=4096 44.6 -> 37.9 us (256 blocks of 16 rows, not 128 of 32), M=1024 22.6 -> 16.7 (128 of 8,
// not 64 of 16); layernorm N=7168 M=8192 142.5 -> 127.3 us (128 blocks, not 256).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "core/plan.h"
#include "core/problem.h"

namespace oink {

inline constexpr int64_t kMinWeightGradBlockRows = 8;
// The most blocks, by the CTA's threads: about one wave on an H200's 132 SMs (2 CTAs of 256
// threads a SM at 111-128 registers, 1 of 512). The same on every device: dweight's bits follow.
inline constexpr int kWeightGradSmallCtaThreads = 256;
inline constexpr int64_t kMaxWeightGradBlocksSmallCta = 256;  // CTAs of at most 256 threads
inline constexpr int64_t kMaxWeightGradBlocksLargeCta = 128;  // CTAs of more (512 threads)

// A block of a row longer than one slice is walked by a cluster of `slices` CTAs (one a slice):
// the wave's CTAs are shared out between the clusters, so that it holds at most
// weight_grad_max_blocks(block_threads) CTAs (at least one cluster).
constexpr int64_t weight_grad_max_blocks(int block_threads, int slices = 1) {
  const int64_t ctas = block_threads <= kWeightGradSmallCtaThreads ? kMaxWeightGradBlocksSmallCta
                                                                   : kMaxWeightGradBlocksLargeCta;
  return std::max<int64_t>(1, ctas / slices);
}

// Rows per weight-gradient block of M = `rows` rows walked by CTAs of `block_threads` threads (a
// cluster of `slices` of them per block): at least kMinWeightGradBlockRows rows, at most
// weight_grad_max_blocks(block_threads, slices) blocks.
constexpr int64_t weight_grad_block_rows(int64_t rows, int block_threads, int slices = 1) {
  const int64_t max_blocks = weight_grad_max_blocks(block_threads, slices);
  return std::max(kMinWeightGradBlockRows, (rows + max_blocks - 1) / max_blocks);
}

// Blocks of weight_grad_block_rows rows; at least one, so that an empty batch has one block of
// zero partials and a zero weight gradient without a special case.
constexpr int64_t weight_grad_blocks(int64_t rows, int block_threads, int slices = 1) {
  const int64_t block_rows = weight_grad_block_rows(rows, block_threads, slices);
  return std::max<int64_t>(1, (rows + block_rows - 1) / block_rows);
}

struct WeightGradBlocks {
  int64_t block_rows = 0;  // weight_grad_block_rows(M, block_threads)
  int64_t blocks = 0;      // weight_grad_blocks(M, block_threads)
};

// The blocks of M rows of N elements of `x_dtype`: those of CUDA CTAs of
// backward_block_threads(N, dtype) threads, in clusters of slices_for(N, dtype). The one function
// the CUDA plan, the CPU kernels and the bindings take, so every device sums the same blocks (the
// CPU for any N and dtype, float64 and rows CUDA refuses included).
WeightGradBlocks weight_grad_blocks_for(int64_t rows, int64_t cols, DType x_dtype);

// A backward CTA has at most 512 threads, so 128 registers each: a thread holds its columns'
// partial sums for the whole block and, at 1 or 2 chunks, their weight and (prefetching) two
// rows' chunks; at 64 registers (1024-thread CTAs) those spilled (ptxas). Rows of more than 512
// lanes' chunks give a thread up to 4 chunks; the backward's dot product is reduced on its own
// lanes, fixed by (N, dtype) alone like the forward's (batch invariance): the forward's lanes up
// to 512, not the same ones past that.
inline constexpr int kBackwardMaxThreads = 512;
inline constexpr int kBackwardMaxChunksPerThread = 4;
// The next row's loads are issued before the current row's reduction for threads of 1 or 2
// chunks (4 chunks of two rows in flight would not fit 128 registers). Element-wise rows (not
// 16-byte aligned) are held to 2 chunks a thread too: at 4 they spilled.
inline constexpr int kBackwardPrefetchMaxChunks = 2;
inline constexpr int kBackwardElementwiseMaxChunks = 2;
// LayerNorm's backward holds a bias partial beside each weight partial, and takes RMSNorm's
// rows: 1, 2 or (vector I/O) 4 chunks a thread. It prefetches the next row at 1 and 2 chunks, as
// RMSNorm's does; at 2 it reads its (float32) weight from L1 at each use instead of holding it
// (norm_backward.cuh, holds_weight): holding the weight and two rows spilled 24 bytes on sm_100a
// and sm_103a (ptxas), and without the prefetch each row's barrier left the SM with no loads in
// flight (20-25 points of copy below RMSNorm's backward on the H200). At 4 it holds nothing but
// its partials (64 of them), as RMSNorm's 4-chunk rows.

// The backward's reduction lanes: the forward's, at most kBackwardMaxThreads.
int backward_threads_per_row(int64_t cols, DType x_dtype);

// The backward CTA's threads: max(backward_threads_per_row, 32), whole warps, one row at a time.
int backward_block_threads(int64_t cols, DType x_dtype);

// Rows longer than one slice (kSliceChunks chunks) run in a thread block cluster per
// weight-gradient block, one CTA a slice (kBackwardMaxThreads threads of
// kBackwardMaxChunksPerThread chunks: a slice exactly), so up to kMaxClusterCtas slices: N <=
// 262144 at 16 bits, 131072 at float32. Every CTA walks the block's rows in the same order; a
// row's sums are its slices' sums, exchanged through distributed shared memory and added in slice
// order. Needs thread block clusters: compute capability 9.0 (backward_clusters_on).
inline constexpr int kBackwardMaxClusterSlices = kMaxClusterCtas;
// A cluster CTA copies its slice of the next row (x and dy) into shared memory while it works on
// the current one: two rows of both tensors' slices (128 KiB), dynamic. Its static shared memory
// (alternate rows' sums of up to 32 warps and kBackwardMaxClusterSlices slices, at most a pair of
// float64: LayerNorm's) stays within kBackwardClusterStaticSmemBytes
// (static_assert in the kernel). Both must fit the device's opt-in limit per CTA.
inline constexpr int kBackwardClusterSmemBytes =
    2 * 2 * kBackwardMaxChunksPerThread * kBackwardMaxThreads * 16;
inline constexpr int kBackwardClusterStaticSmemBytes = 2 * (32 + kBackwardMaxClusterSlices) * 16;

// Rows a cluster does not hold (more than kBackwardMaxClusterSlices slices, or more than one on a
// device without the cluster backward: problem.clusters), and rows that are not 16-byte aligned
// past what the element-wise row kernel holds (more than kBackwardElementwiseMaxChunks chunks a
// thread) and have no aligned copy (N not whole chunks): the looped backward
// (kernels/norm_backward_looped.cuh), two kernels on any device. The first
// folds each row's sums on a CTA of kBackwardMaxThreads lanes (chunk c on lane c % 512) into
// [M] row sums; the second, a thread per column chunk and weight-gradient block, reads them and
// writes dx and the block's partials. x and dy are read twice: 5 passes over the row bytes where
// the one-pass kernels make 3.
bool backward_looped(const NormBackwardProblem& problem);

// Bytes of one row's sums in the looped backward: RMSNorm's sum(g * x), LayerNorm's pair, each
// in the accumulation type (float, double for float32 rows). The kernel static_asserts its type.
constexpr int backward_row_sums_bytes(bool layernorm, bool float32_rows) {
  return (float32_rows ? 8 : 4) * (layernorm ? 2 : 1);
}
// The columns kernel's CTA: 256 threads, so up to 255 registers a thread (at 512, 128, LayerNorm's
// element-wise half rows with a float32 weight spilled 4 bytes, ptxas sm_90a).
inline constexpr int kLoopedColumnThreads = 256;

// The backward on CUDA (kernels/norm_backward.cuh): one CTA per weight-gradient block (a cluster
// of one CTA per slice for long rows), which walks its rows in order, a whole row at a time (the
// forward's reduction lanes, one chunk or two per thread; a slice's 512 lanes of 4 chunks), keeps
// its columns' weight and partial sums in registers, and writes one partial row; a second kernel
// adds the partials in block order per column.
struct BackwardPlan {
  int chunk_elems = 8;         // elements of x in one 16-byte chunk
  int64_t chunks_per_row = 0;  // ceil(N / chunk_elems)
  bool vector_io = false;      // x, dy, dx and the weight move as 16-byte chunks
  int threads_per_row = 1;     // backward_threads_per_row(N, dtype)
  int chunks_per_thread = 1;   // 1, 2 or 4: ceil(chunks / threads_per_row) to a power of two
  int block_threads = 32;      // backward_block_threads(N, dtype): max(threads_per_row, 32)
  int slices = 1;              // slices_for(N, dtype): a CTA each
  int cluster_ctas = 0;        // slices > 1: CTAs per cluster (= slices); 0: no cluster
  int smem_bytes = 0;          // dynamic shared memory: kBackwardClusterSmemBytes in a cluster
  // Loads of the next row are issued before the current row's reduction: vector I/O (raw 16-byte
  // chunks wait in registers) and at most kBackwardPrefetchMaxChunks chunks per thread.
  bool prefetch_next_row = false;
  // weight_grad_blocks_for(M, N, dtype): at most weight_grad_max_blocks(block_threads) blocks.
  int64_t block_rows = 0;    // rows per block, at least kMinWeightGradBlockRows
  int64_t blocks = 0;        // CTAs (clusters) of the row kernel, partial rows
  int partial_bytes = 4;     // a partial's type: float, or double for float32 rows (as the forward)
  int reduce_threads = 256;  // the partials' reduction: one thread per column
  int64_t reduce_grid = 0;
  // backward_looped(problem): the row sums' kernel (a CTA of kBackwardMaxThreads per row), then
  // the columns' (grid column_tiles x blocks of kLoopedColumnThreads threads, a chunk each).
  bool looped = false;
  int64_t column_tiles = 0;  // looped: ceil(chunks_per_row / kLoopedColumnThreads), else 0
  int row_sums_bytes = 0;    // looped: backward_row_sums_bytes(op, dtype), else 0
};

// Whether x, dy, dx and the weight can move as 16-byte chunks (every row aligned, N whole chunks).
bool backward_vector_io(const NormBackwardProblem& problem);

// Rows too long for the element-wise kernel (more than kBackwardElementwiseMaxChunks chunks a
// thread: 16-bit N > 8192, float32 N > 4096) whose fresh copies would be aligned (N whole
// chunks): the binding copies x, dy and the weight into new dense tensors (and writes dx in
// that layout) instead of refusing the call.
bool backward_wants_dense_rows(const NormBackwardProblem& problem);

// Why the CUDA kernel cannot take this problem (a sentence for the user), or nothing: float64
// runs on the CPU only; every other row length and layout has a kernel on every device.
std::optional<std::string> backward_unsupported(const NormBackwardProblem& problem);

// Whether `device` runs the cluster backward: thread block clusters (compute capability 9.0 and
// up) and kBackwardClusterSmemBytes + kBackwardClusterStaticSmemBytes of shared memory per CTA.
// The binding sets NormBackwardProblem::clusters from it.
bool backward_clusters_on(const DeviceInfo& device);

// Precondition: backward_unsupported(problem) is empty. Throws std::logic_error if the plan it
// built breaks an invariant (a bug in the planner).
BackwardPlan make_backward_plan(const NormBackwardProblem& problem);

// Empty if `plan` is consistent with `problem` and names a kernel the CUDA dispatch instantiates
// (core/kernel_table.h, backward_kernel_entry), otherwise the first broken invariant.
std::string backward_plan_violation(const BackwardPlan& plan, const NormBackwardProblem& problem);

// Bytes of the partials the plan's kernels exchange: [blocks][N] partials for the weight and for
// the bias, each where there is one (the weight's first).
int64_t backward_partials_bytes(const BackwardPlan& plan, const NormBackwardProblem& problem);

// The looped plan's [M] row sums follow the partials in the same scratch buffer, at this offset
// (16-byte aligned: a row's sums are up to a pair of doubles); their bytes; 0 when not looped.
int64_t backward_row_sums_offset(const BackwardPlan& plan, const NormBackwardProblem& problem);
int64_t backward_row_sums_total_bytes(const BackwardPlan& plan, const NormBackwardProblem& problem);

}  // namespace oink
