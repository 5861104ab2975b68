#include "core/backward_plan.h"

#include <stdexcept>

#include "core/kernel_table.h"

namespace oink {
namespace {

int chunk_elems_of(const NormBackwardProblem& bp) { return 16 / dtype_size(bp.rows.x_dtype); }

// Chunks per thread of a row of `cols` elements: 1, 2 or 4 (a power of two covering the row).
int backward_chunks_per_thread(int64_t cols, DType x_dtype) {
  const int64_t chunks =
      ceil_div(ceil_div(cols, 16 / dtype_size(x_dtype)), backward_threads_per_row(cols, x_dtype));
  return chunks <= 1 ? 1 : chunks <= 2 ? 2 : 4;
}

}  // namespace

int backward_threads_per_row(int64_t cols, DType x_dtype) {
  return std::min(threads_per_row_for(cols, x_dtype), kBackwardMaxThreads);
}

int backward_block_threads(int64_t cols, DType x_dtype) {
  return std::max(backward_threads_per_row(cols, x_dtype), 32);
}

WeightGradBlocks weight_grad_blocks_for(int64_t rows, int64_t cols, DType x_dtype) {
  const int block_threads = backward_block_threads(cols, x_dtype);
  // float64 rows run on the CPU only, in no cluster: their blocks are one-slice rows'.
  const int slices = x_dtype == DType::kFloat64 ? 1 : slices_for(cols, x_dtype);
  return {weight_grad_block_rows(rows, block_threads, slices),
          weight_grad_blocks(rows, block_threads, slices)};
}

// Every row of x, dy and dx starts 16-byte aligned and N is whole chunks; the weight's chunks
// are aligned to their own size. Without rows, x, dy and dx have no memory to align (an empty
// tensor's address may be null); the weight is still read.
bool backward_vector_io(const NormBackwardProblem& bp) {
  const NormProblem& p = bp.rows;
  const int chunk_elems = chunk_elems_of(bp);
  if (p.cols % chunk_elems != 0) return false;
  if (p.has_weight && p.w_align < chunk_elems * dtype_size(p.w_dtype)) return false;
  if (p.rows == 0) return true;
  if (p.x_align < 16 || bp.dy_align < 16 || bp.dx_align < 16) return false;
  if (!strides_multiple_of(p.x_strides, p.row_dims, chunk_elems) ||
      !strides_multiple_of(bp.dy_strides, p.row_dims, chunk_elems) ||
      !strides_multiple_of(bp.dx_strides, p.row_dims, chunk_elems)) {
    return false;
  }
  return true;
}

bool backward_wants_dense_rows(const NormBackwardProblem& bp) {
  const NormProblem& p = bp.rows;
  return p.x_dtype != DType::kFloat64 &&
         slices_for(p.cols, p.x_dtype) <= kBackwardMaxClusterSlices &&
         backward_chunks_per_thread(p.cols, p.x_dtype) > kBackwardElementwiseMaxChunks &&
         !backward_vector_io(bp) && p.cols % chunk_elems_of(bp) == 0;
}

bool backward_looped(const NormBackwardProblem& bp) {
  const NormProblem& p = bp.rows;
  if (p.x_dtype == DType::kFloat64) return false;
  const int slices = slices_for(p.cols, p.x_dtype);
  return slices > (bp.clusters ? kBackwardMaxClusterSlices : 1) ||
         (backward_chunks_per_thread(p.cols, p.x_dtype) > kBackwardElementwiseMaxChunks &&
          !backward_vector_io(bp));
}

std::optional<std::string> backward_unsupported(const NormBackwardProblem& bp) {
  if (bp.rows.x_dtype == DType::kFloat64) return std::string("float64 rows run on the CPU only");
  return std::nullopt;
}

bool backward_clusters_on(const DeviceInfo& device) {
  constexpr int kClusterCtaSmem = kBackwardClusterSmemBytes + kBackwardClusterStaticSmemBytes;
  return device.cc_major >= 9 && device.max_smem_per_block >= kClusterCtaSmem;
}

BackwardPlan make_backward_plan(const NormBackwardProblem& bp) {
  const NormProblem& p = bp.rows;
  BackwardPlan plan;
  plan.chunk_elems = 16 / dtype_size(p.x_dtype);
  plan.chunks_per_row = ceil_div(p.cols, plan.chunk_elems);
  plan.vector_io = backward_vector_io(bp);
  plan.threads_per_row = backward_threads_per_row(p.cols, p.x_dtype);
  plan.chunks_per_thread = backward_chunks_per_thread(p.cols, p.x_dtype);
  plan.block_threads = backward_block_threads(p.cols, p.x_dtype);
  plan.slices = slices_for(p.cols, p.x_dtype);
  plan.looped = backward_looped(bp);
  const bool cluster = plan.slices > 1 && !plan.looped;
  plan.cluster_ctas = cluster ? plan.slices : 0;
  plan.smem_bytes = cluster ? kBackwardClusterSmemBytes : 0;
  plan.prefetch_next_row =
      !plan.looped && plan.vector_io && plan.chunks_per_thread <= kBackwardPrefetchMaxChunks;
  if (plan.looped) {
    plan.block_threads = kBackwardMaxThreads;
    plan.column_tiles = ceil_div(plan.chunks_per_row, int64_t{kLoopedColumnThreads});
    plan.row_sums_bytes =
        backward_row_sums_bytes(p.op == NormOp::kLayerNorm, p.x_dtype == DType::kFloat32);
  }
  const WeightGradBlocks blocks = weight_grad_blocks_for(p.rows, p.cols, p.x_dtype);
  plan.block_rows = blocks.block_rows;
  plan.blocks = blocks.blocks;
  plan.partial_bytes = p.x_dtype == DType::kFloat32 ? 8 : 4;
  plan.reduce_grid = std::max<int64_t>(1, ceil_div(p.cols, plan.reduce_threads));
  const std::string why = backward_plan_violation(plan, bp);
  if (!why.empty()) throw std::logic_error("make_backward_plan: " + why);
  return plan;
}

int backward_kernel_entry(const BackwardPlan& plan) {
  for (int i = 0; i < static_cast<int>(kBackwardKernels.size()); ++i) {
    const BackwardKernel& k = kBackwardKernels[i];
    if (k.vector_io == plan.vector_io && k.chunks_per_thread == plan.chunks_per_thread &&
        k.prefetch_next_row == plan.prefetch_next_row && k.cluster == (plan.cluster_ctas > 0) &&
        k.looped == plan.looped) {
      return i;
    }
  }
  return -1;
}

std::string backward_plan_violation(const BackwardPlan& plan, const NormBackwardProblem& bp) {
  const NormProblem& p = bp.rows;
  if (const auto why = backward_unsupported(bp)) return *why;
  if (plan.chunk_elems * dtype_size(p.x_dtype) != 16) return "chunk is not 16 bytes";
  if (plan.chunks_per_row != ceil_div(p.cols, plan.chunk_elems)) return "chunks_per_row is not N's";
  if (plan.vector_io && !backward_vector_io(bp)) {
    return "vector_io needs aligned rows of x, dy and dx, whole chunks and an aligned weight";
  }
  if (plan.threads_per_row != backward_threads_per_row(p.cols, p.x_dtype)) {
    return "threads_per_row must be backward_threads_per_row(N, dtype) (batch invariance of dx)";
  }
  const int c = plan.chunks_per_thread;
  if (c != backward_chunks_per_thread(p.cols, p.x_dtype) ||
      int64_t{c} * plan.threads_per_row * plan.slices < plan.chunks_per_row) {
    return "chunks_per_thread must be 1, 2 or 4, covering the row";
  }
  if (plan.slices != slices_for(p.cols, p.x_dtype)) {
    return "slices must be slices_for(N, dtype) (batch invariance of dx)";
  }
  if (plan.looped != backward_looped(bp)) {
    return "looped must be backward_looped(problem): rows past the cluster's (or the device has "
           "none) or the element-wise kernel's reach";
  }
  if (plan.looped) {
    // Two kernels, no cluster, no shared memory staging: the row sums on 512 lanes, then a thread
    // per column chunk (kernels/norm_backward_looped.cuh).
    if (plan.cluster_ctas != 0 || plan.prefetch_next_row ||
        plan.block_threads != kBackwardMaxThreads ||
        plan.column_tiles != ceil_div(plan.chunks_per_row, int64_t{kLoopedColumnThreads}) ||
        plan.row_sums_bytes !=
            backward_row_sums_bytes(p.op == NormOp::kLayerNorm, p.x_dtype == DType::kFloat32)) {
      return "a looped plan runs kBackwardMaxThreads threads without a cluster or prefetch, "
             "column_tiles covering the row's chunks and row_sums_bytes of the op's sums";
    }
  } else if (plan.column_tiles != 0 || plan.row_sums_bytes != 0) {
    return "column_tiles and row_sums_bytes are the looped plan's";
  } else if (plan.slices > 1) {
    // A CTA's lanes and chunks are one slice exactly: the kernel finds slice s at s * kSliceChunks.
    if (c * plan.threads_per_row != kSliceChunks || !plan.vector_io ||
        plan.cluster_ctas != plan.slices || plan.slices > kBackwardMaxClusterSlices) {
      return "a long row runs vector I/O in a cluster of one CTA per slice, each "
             "threads_per_row * chunks_per_thread = kSliceChunks chunks";
    }
  } else if (plan.cluster_ctas != 0) {
    return "rows of one slice run without a cluster";
  }
  if (plan.smem_bytes != (plan.cluster_ctas > 0 ? kBackwardClusterSmemBytes : 0)) {
    return "smem_bytes must be kBackwardClusterSmemBytes in a cluster (two staged rows), else 0";
  }
  if (p.op == NormOp::kLayerNorm && p.has_weight && p.w_dtype != DType::kFloat32) {
    return "layernorm's backward kernel takes a float32 weight (the binding widens it)";
  }
  if (p.has_bias && p.op != NormOp::kLayerNorm) return "only layernorm has a bias";
  if ((!plan.looped && plan.block_threads != std::max(plan.threads_per_row, 32)) ||
      plan.block_threads > kBackwardMaxThreads) {
    return "block_threads must be max(threads_per_row, 32): one row at a time, whole warps";
  }
  // Every entry is instantiated for LayerNorm's gradient too (tests/cpp/test_kernel_table.cpp).
  if (backward_kernel_entry(plan) < 0) {
    return "no instantiated backward kernel (core/kernel_table.h) has the plan's vector_io, "
           "chunks_per_thread, prefetch_next_row, cluster and looped";
  }
  // The CPU kernels take these blocks too: a function of M, N and the dtype, never the device's.
  const WeightGradBlocks blocks = weight_grad_blocks_for(p.rows, p.cols, p.x_dtype);
  if (plan.block_rows != blocks.block_rows || plan.blocks != blocks.blocks) {
    return "the weight-gradient blocks must be weight_grad_blocks_for(M, N, dtype)'s: at most "
           "weight_grad_max_blocks(block_threads) blocks of kMinWeightGradBlockRows rows or more";
  }
  if (plan.partial_bytes != (p.x_dtype == DType::kFloat32 ? 8 : 4)) {
    return "partials are float, double for float32 rows";
  }
  if (plan.reduce_threads < 32 || plan.reduce_threads > 1024 ||
      plan.reduce_grid * plan.reduce_threads < p.cols) {
    return "the partials' reduction must cover every column";
  }
  return "";
}

int64_t backward_partials_bytes(const BackwardPlan& plan, const NormBackwardProblem& bp) {
  const int64_t sets = int64_t{bp.rows.has_weight} + int64_t{bp.rows.has_bias};
  return sets * plan.blocks * bp.rows.cols * plan.partial_bytes;
}

int64_t backward_row_sums_offset(const BackwardPlan& plan, const NormBackwardProblem& bp) {
  return ceil_div(backward_partials_bytes(plan, bp), int64_t{16}) * 16;
}

int64_t backward_row_sums_total_bytes(const BackwardPlan& plan, const NormBackwardProblem& bp) {
  return plan.looped ? bp.rows.rows * plan.row_sums_bytes : 0;
}

}  // namespace oink
