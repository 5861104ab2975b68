// The backward passes' weight-gradient blocks and the CUDA backward plan: the blocks depend on
// M and the CTA's threads (N and the dtype) alone and cover every row once, at most 256 of them
// for CTAs of up to 256 threads, 128 for 512-thread CTAs (shared out between a long row's
// clusters); the plan keeps the forward's lanes, takes
// vector I/O exactly when every stream is aligned, refuses what its kernel cannot run with a
// sentence naming N, and backward_plan_violation catches broken plans.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <utility>

#include "core/backward_plan.h"

namespace oink {
namespace {

NormBackwardProblem backward(DType x, int64_t n, int64_t m, bool weight = true,
                             DType w = DType::kBFloat16) {
  NormBackwardProblem bp;
  NormProblem& p = bp.rows;
  p.x_dtype = x;
  p.w_dtype = weight ? w : x;
  p.has_weight = weight;
  p.rows = m;
  p.cols = n;
  set_row_stride(p, n);
  bp.dy_strides = bp.dx_strides = p.x_strides;
  return bp;
}

TEST(WeightGradBlocks, AboutOneWaveOfCtasOfAtLeast8Rows) {
  EXPECT_EQ(kMinWeightGradBlockRows, 8);
  EXPECT_EQ(weight_grad_max_blocks(32), 256);
  EXPECT_EQ(weight_grad_max_blocks(256), 256);
  EXPECT_EQ(weight_grad_max_blocks(512), 128);
  for (const int threads : {32, 256, 512}) {
    EXPECT_EQ(weight_grad_blocks(0, threads), 1);  // one block of zero partials: a zero gradient
    EXPECT_EQ(weight_grad_block_rows(0, threads), 8);
    EXPECT_EQ(weight_grad_blocks(1, threads), 1);
    EXPECT_EQ(weight_grad_blocks(8, threads), 1);
    EXPECT_EQ(weight_grad_blocks(9, threads), 2);  // the 8-row floor, the last block short
    EXPECT_EQ(weight_grad_blocks(70, threads), 9);
  }
  // CTAs of at most 256 threads: 256 blocks from M = 2048 (8 rows each), then longer blocks.
  EXPECT_EQ(weight_grad_blocks(1024, 256), 128);
  EXPECT_EQ(weight_grad_block_rows(2048, 256), 8);
  EXPECT_EQ(weight_grad_blocks(2048, 256), 256);
  EXPECT_EQ(weight_grad_block_rows(2049, 256), 9);
  EXPECT_EQ(weight_grad_blocks(2049, 256), 228);
  EXPECT_EQ(weight_grad_block_rows(4096, 256), 16);
  EXPECT_EQ(weight_grad_blocks(4096, 256), 256);
  EXPECT_EQ(weight_grad_block_rows(4097, 256), 17);
  EXPECT_EQ(weight_grad_blocks(4097, 256), 241);
  EXPECT_EQ(weight_grad_block_rows(8192, 256), 32);
  EXPECT_EQ(weight_grad_blocks(8192, 256), 256);
  EXPECT_EQ(weight_grad_block_rows(131072, 256), 512);
  EXPECT_EQ(weight_grad_blocks(131072, 256), 256);
  // 512-thread CTAs: 128 blocks from M = 1024.
  EXPECT_EQ(weight_grad_blocks(512, 512), 64);
  EXPECT_EQ(weight_grad_block_rows(1024, 512), 8);
  EXPECT_EQ(weight_grad_blocks(1024, 512), 128);
  EXPECT_EQ(weight_grad_block_rows(1025, 512), 9);
  EXPECT_EQ(weight_grad_blocks(1025, 512), 114);
  EXPECT_EQ(weight_grad_block_rows(2048, 512), 16);
  EXPECT_EQ(weight_grad_blocks(2048, 512), 128);
  EXPECT_EQ(weight_grad_block_rows(2049, 512), 17);
  EXPECT_EQ(weight_grad_blocks(2049, 512), 121);
  EXPECT_EQ(weight_grad_block_rows(4096, 512), 32);
  EXPECT_EQ(weight_grad_blocks(4096, 512), 128);
  EXPECT_EQ(weight_grad_block_rows(8192, 512), 64);
  EXPECT_EQ(weight_grad_blocks(8192, 512), 128);
  EXPECT_EQ(weight_grad_block_rows(131072, 512), 1024);
  EXPECT_EQ(weight_grad_blocks(131072, 512), 128);
  for (const int threads : {32, 64, 128, 256, 512}) {
    const int64_t max_blocks = threads <= 256 ? 256 : 128;
    for (int64_t m = 1; m < (int64_t{1} << 24); m = m * 3 + 1) {
      const int64_t rows = weight_grad_block_rows(m, threads);
      const int64_t blocks = weight_grad_blocks(m, threads);
      EXPECT_GE(rows, kMinWeightGradBlockRows);
      EXPECT_LE(blocks, max_blocks) << m << " " << threads;
      EXPECT_GE(blocks * rows, m) << m;        // every row in a block
      EXPECT_LT((blocks - 1) * rows, m) << m;  // no empty block (but M = 0's one)
      // As many blocks as the cap allows: a block of one row fewer would need more than that.
      if (rows > kMinWeightGradBlockRows) {
        EXPECT_GT(m, (rows - 1) * max_blocks) << m;
      }
    }
  }
}

// The blocks of a problem are its CUDA CTA's (max(backward_threads_per_row, 32) threads): N, the
// dtype and M decide them, for the CUDA plan and the CPU kernels alike.
TEST(WeightGradBlocks, FollowTheBackwardCtaOfNAndTheDtype) {
  EXPECT_EQ(backward_block_threads(64, DType::kBFloat16), 32);
  EXPECT_EQ(backward_block_threads(4096, DType::kBFloat16), 256);
  EXPECT_EQ(backward_block_threads(4104, DType::kBFloat16), 512);
  EXPECT_EQ(backward_block_threads(7168, DType::kBFloat16), 512);
  EXPECT_EQ(backward_block_threads(16384, DType::kBFloat16), 512);
  EXPECT_EQ(backward_block_threads(2048, DType::kFloat32), 256);
  EXPECT_EQ(backward_block_threads(4096, DType::kFloat32), 512);
  EXPECT_EQ(backward_block_threads(32768, DType::kFloat64), 512);  // CPU only: any N
  const auto blocks = [](int64_t m, int64_t n, DType x) {
    const WeightGradBlocks b = weight_grad_blocks_for(m, n, x);
    return std::pair<int64_t, int64_t>(b.block_rows, b.blocks);
  };
  using P = std::pair<int64_t, int64_t>;
  EXPECT_EQ(blocks(0, 4096, DType::kBFloat16), P(8, 1));
  EXPECT_EQ(blocks(0, 7168, DType::kBFloat16), P(8, 1));
  EXPECT_EQ(blocks(2048, 4096, DType::kBFloat16), P(8, 256));
  EXPECT_EQ(blocks(2048, 7168, DType::kBFloat16), P(16, 128));
  EXPECT_EQ(blocks(4096, 4096, DType::kBFloat16), P(16, 256));
  EXPECT_EQ(blocks(8192, 4096, DType::kBFloat16), P(32, 256));
  EXPECT_EQ(blocks(4096, 7168, DType::kBFloat16), P(32, 128));
  EXPECT_EQ(blocks(8192, 7168, DType::kBFloat16), P(64, 128));
  EXPECT_EQ(blocks(32768, 16384, DType::kFloat16), P(256, 128));
  EXPECT_EQ(blocks(4096, 4096, DType::kFloat32), P(32, 128));
  EXPECT_EQ(blocks(4096, 64, DType::kFloat32), P(16, 256));
}

TEST(MakeBackwardPlan, ForwardLanesUpTo512ThreadsOfOneToFourChunks) {
  for (const DType x : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    const int64_t max_n = x == DType::kFloat32 ? 8192 : 16384;
    for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1000}, int64_t{4096},
                            int64_t{7168}, max_n}) {
      for (const int64_t m : {int64_t{0}, int64_t{1}, int64_t{37}, int64_t{65536}}) {
        const NormBackwardProblem bp = backward(x, n, m);
        ASSERT_FALSE(backward_unsupported(bp)) << n;
        const BackwardPlan plan = make_backward_plan(bp);
        EXPECT_EQ(backward_plan_violation(plan, bp), "");
        EXPECT_EQ(plan.threads_per_row, std::min(threads_per_row_for(n, x), 512));
        EXPECT_LE(plan.block_threads, kBackwardMaxThreads);
        EXPECT_GE(plan.chunks_per_thread, 1);
        EXPECT_LE(plan.chunks_per_thread, kBackwardMaxChunksPerThread);
        EXPECT_EQ(plan.vector_io, n % plan.chunk_elems == 0);
        EXPECT_LE(plan.chunks_per_thread, plan.vector_io ? 4 : 2);
        EXPECT_EQ(plan.prefetch_next_row, plan.vector_io && plan.chunks_per_thread <= 2);
        EXPECT_EQ(plan.block_threads, backward_block_threads(n, x));
        EXPECT_EQ(plan.block_rows, weight_grad_block_rows(m, plan.block_threads));
        EXPECT_EQ(plan.blocks, weight_grad_blocks(m, plan.block_threads));
        EXPECT_LE(plan.blocks, plan.block_threads <= 256 ? 256 : 128);
        EXPECT_EQ(plan.partial_bytes, x == DType::kFloat32 ? 8 : 4);
        EXPECT_EQ(backward_partials_bytes(plan, bp), plan.blocks * n * plan.partial_bytes);
        EXPECT_EQ(backward_partials_bytes(plan, backward(x, n, m, false)), 0);
      }
    }
  }
}

TEST(MakeBackwardPlan, VectorIoExactlyWhenEveryStreamIsAligned) {
  const auto vector_io = [](const std::function<void(NormBackwardProblem&)>& change) {
    NormBackwardProblem bp = backward(DType::kBFloat16, 4096, 17);
    change(bp);
    return make_backward_plan(bp).vector_io;
  };
  EXPECT_TRUE(vector_io([](NormBackwardProblem&) {}));
  EXPECT_FALSE(vector_io([](NormBackwardProblem& bp) { bp.rows.x_align = 2; }));
  EXPECT_FALSE(vector_io([](NormBackwardProblem& bp) { bp.dy_align = 8; }));
  EXPECT_FALSE(vector_io([](NormBackwardProblem& bp) { bp.dx_align = 4; }));
  EXPECT_FALSE(vector_io([](NormBackwardProblem& bp) { bp.rows.w_align = 8; }));
  EXPECT_FALSE(vector_io([](NormBackwardProblem& bp) { bp.dy_strides.s[0] = 4097; }));
  EXPECT_TRUE(vector_io([](NormBackwardProblem& bp) { bp.dy_strides.s[0] = 4104; }));
  // A float32 weight's 8-element chunk is 32 bytes: 16-byte alignment is not enough.
  EXPECT_FALSE(vector_io([](NormBackwardProblem& bp) {
    bp.rows.w_dtype = DType::kFloat32;
    bp.rows.w_align = 16;
  }));
}

TEST(BackwardUnsupported, NamesTheLimit) {
  // Every N: up to 16 slices a cluster CTA each (16-bit N <= 262144, float32 N <= 131072), past
  // that the looped pair. Only float64 stays on the CPU.
  EXPECT_FALSE(backward_unsupported(backward(DType::kBFloat16, 16392, 4)));
  EXPECT_FALSE(backward_unsupported(backward(DType::kBFloat16, 262144, 4)));
  EXPECT_FALSE(backward_unsupported(backward(DType::kBFloat16, 262152, 4)));
  EXPECT_FALSE(backward_unsupported(backward(DType::kFloat32, 131076, 4)));
  const auto wide = backward_unsupported(backward(DType::kFloat64, 64, 4));
  ASSERT_TRUE(wide);
  EXPECT_NE(wide->find("CPU only"), std::string::npos) << *wide;
  // The cluster backward needs compute capability 9.0 and room to stage two rows a CTA (not
  // sm_120's 99 KiB); without it, rows of more than one slice run looped.
  DeviceInfo ampere;
  ampere.cc_major = 8;
  ampere.max_smem_per_block = 163 * 1024;
  DeviceInfo hopper;
  hopper.cc_major = 9;
  hopper.max_smem_per_block = 227 * 1024;
  DeviceInfo small_smem = hopper;
  small_smem.cc_major = 12;
  small_smem.max_smem_per_block = 99 * 1024;
  EXPECT_FALSE(backward_clusters_on(ampere));
  EXPECT_TRUE(backward_clusters_on(hopper));
  EXPECT_FALSE(backward_clusters_on(small_smem));
  for (const int64_t n : {int64_t{16384}, int64_t{16392}, int64_t{262144}, int64_t{262152}}) {
    NormBackwardProblem bp = backward(DType::kBFloat16, n, 4);
    bp.clusters = false;
    ASSERT_FALSE(backward_unsupported(bp)) << n;
    const BackwardPlan plan = make_backward_plan(bp);
    EXPECT_EQ(backward_plan_violation(plan, bp), "") << n;
    EXPECT_EQ(plan.looped, n > 16384) << n;
    EXPECT_EQ(plan.cluster_ctas, 0) << n;
    // The same weight-gradient blocks as on a device with clusters: dweight's bits follow.
    bp.clusters = true;
    EXPECT_EQ(make_backward_plan(bp).blocks, plan.blocks) << n;
    EXPECT_EQ(make_backward_plan(bp).block_rows, plan.block_rows) << n;
  }
}

// Rows longer than one slice: a cluster of one 512-thread CTA per slice (4 chunks a thread: the
// slice exactly), vector I/O, no prefetch; the blocks share one wave of 128 such CTAs.
TEST(MakeBackwardPlan, LongRowsRunAClusterOfOneCtaPerSlice) {
  for (const DType x : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    const int64_t slice = x == DType::kFloat32 ? 8192 : 16384;
    for (const int64_t n : {slice + 8, 2 * slice, 3 * slice - 8, 5 * slice, 16 * slice}) {
      for (const int64_t m : {int64_t{0}, int64_t{1}, int64_t{37}, int64_t{4096}}) {
        const NormBackwardProblem bp = backward(x, n, m);
        ASSERT_FALSE(backward_unsupported(bp)) << n;
        const BackwardPlan plan = make_backward_plan(bp);
        EXPECT_EQ(backward_plan_violation(plan, bp), "");
        const int slices = static_cast<int>((n + slice - 1) / slice);
        EXPECT_EQ(plan.slices, slices) << n;
        EXPECT_EQ(plan.cluster_ctas, slices) << n;
        EXPECT_EQ(plan.threads_per_row, kBackwardMaxThreads);
        EXPECT_EQ(plan.block_threads, kBackwardMaxThreads);
        EXPECT_EQ(plan.chunks_per_thread, kBackwardMaxChunksPerThread);
        EXPECT_TRUE(plan.vector_io);
        EXPECT_FALSE(plan.prefetch_next_row);
        EXPECT_EQ(plan.blocks, weight_grad_blocks(m, kBackwardMaxThreads, slices));
        EXPECT_LE(plan.blocks * slices, std::max(128, slices)) << n << " " << m;
        // The CPU kernels take the same blocks.
        const WeightGradBlocks cpu = weight_grad_blocks_for(m, n, x);
        EXPECT_EQ(cpu.blocks, plan.blocks);
        EXPECT_EQ(cpu.block_rows, plan.block_rows);
      }
    }
  }
  EXPECT_EQ(weight_grad_blocks(4096, 512, 16), 8);  // 8 clusters of 16 CTAs: 512 rows each
  EXPECT_EQ(weight_grad_blocks(4096, 512, 2), 64);
  EXPECT_EQ(weight_grad_blocks(4096, 512, 3), 42);
  // Unaligned long rows are copied into dense tensors when N is whole chunks; else looped.
  NormBackwardProblem unaligned = backward(DType::kBFloat16, 32768, 4);
  unaligned.dy_align = 2;
  EXPECT_TRUE(backward_wants_dense_rows(unaligned));
  EXPECT_TRUE(backward_looped(unaligned));  // as it stands, before the copy
  NormBackwardProblem odd = backward(DType::kBFloat16, 32767, 4);
  EXPECT_FALSE(backward_wants_dense_rows(odd));
  EXPECT_TRUE(backward_looped(odd));
  EXPECT_FALSE(backward_unsupported(odd));
}

// Unaligned rows take the element-wise kernel, up to 2 chunks a thread (16-bit N <= 8192); longer
// ones are copied into dense, aligned tensors when N is whole chunks, and looped otherwise.
// layernorm_backward: a float32 weight (widened by the binding) and a bias, whose partials
// follow the weight's; RMSNorm's rows (one slice: 16-bit N <= 16384, float32 N <= 8192).
NormBackwardProblem layernorm_backward(DType x, int64_t n, int64_t m, bool weight, bool bias) {
  NormBackwardProblem bp = backward(x, n, m, weight, DType::kFloat32);
  bp.rows.op = NormOp::kLayerNorm;
  bp.rows.has_bias = bias;
  return bp;
}

TEST(MakeBackwardPlan, LayerNormTakesRmsNormsRows) {
  for (const DType x : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    const int64_t limit = x == DType::kFloat32 ? 8192 : 16384;
    for (const int64_t n : {int64_t{7}, int64_t{1000}, int64_t{1001}, limit / 2, limit}) {
      const NormBackwardProblem bp = layernorm_backward(x, n, 4096, true, true);
      ASSERT_FALSE(backward_unsupported(bp)) << n;
      const BackwardPlan plan = make_backward_plan(bp);
      // RMSNorm's plan for the row, bias or not.
      const BackwardPlan rms = make_backward_plan(backward(x, n, 4096));
      EXPECT_EQ(plan.chunks_per_thread, rms.chunks_per_thread) << n;
      EXPECT_EQ(plan.threads_per_row, rms.threads_per_row) << n;  // batch invariance by N
      // The next row is prefetched at 1 and 2 chunks a thread, as RMSNorm's (at 2 the weight is
      // read at each use instead of held: kernels/norm_backward.cuh, holds_weight); not at 4.
      EXPECT_EQ(plan.prefetch_next_row, plan.vector_io && plan.chunks_per_thread <= 2) << n;
      // Two sets of partials, the weight's and the bias's; one without a weight.
      EXPECT_EQ(backward_partials_bytes(plan, bp), 2 * plan.blocks * n * plan.partial_bytes);
      const NormBackwardProblem bias_only = layernorm_backward(x, n, 4096, false, true);
      EXPECT_EQ(backward_partials_bytes(make_backward_plan(bias_only), bias_only),
                plan.blocks * n * plan.partial_bytes);
    }
    // The longest rows of one slice take 4 chunks a thread; longer ones RMSNorm's cluster, up
    // to its limit, with the bias partials beside the weight's.
    EXPECT_EQ(make_backward_plan(layernorm_backward(x, limit, 64, true, true)).chunks_per_thread,
              kBackwardMaxChunksPerThread);
    for (const int64_t n : {limit + 8, 16 * limit}) {
      const NormBackwardProblem bp = layernorm_backward(x, n, 4096, true, true);
      ASSERT_FALSE(backward_unsupported(bp)) << n;
      const BackwardPlan plan = make_backward_plan(bp);
      const BackwardPlan rms = make_backward_plan(backward(x, n, 4096));
      EXPECT_EQ(plan.cluster_ctas, rms.cluster_ctas) << n;
      EXPECT_EQ(plan.cluster_ctas, plan.slices) << n;
      EXPECT_EQ(plan.smem_bytes, kBackwardClusterSmemBytes) << n;
      EXPECT_EQ(backward_partials_bytes(plan, bp), 2 * plan.blocks * n * plan.partial_bytes);
    }
    // Past the cluster: the looped pair, with a pair of sums a row.
    const NormBackwardProblem longer = layernorm_backward(x, 16 * limit + 8, 4, true, true);
    const BackwardPlan looped = make_backward_plan(longer);
    EXPECT_TRUE(looped.looped);
    EXPECT_EQ(looped.row_sums_bytes, 2 * looped.partial_bytes);
  }
  // Its kernel reads a float32 weight only; only layernorm has a bias.
  NormBackwardProblem bp = layernorm_backward(DType::kBFloat16, 4096, 64, true, true);
  const BackwardPlan plan = make_backward_plan(bp);
  bp.rows.w_dtype = DType::kBFloat16;
  EXPECT_NE(backward_plan_violation(plan, bp).find("float32 weight"), std::string::npos);
  NormBackwardProblem rms = backward(DType::kBFloat16, 4096, 64);
  rms.rows.has_bias = true;
  EXPECT_NE(backward_plan_violation(make_backward_plan(backward(DType::kBFloat16, 4096, 64)), rms)
                .find("bias"),
            std::string::npos);
}

TEST(BackwardUnsupported, LongUnalignedRowsAreCopiedWhenThatAlignsThem) {
  const auto unaligned = [](int64_t n) {
    NormBackwardProblem bp = backward(DType::kBFloat16, n, 4);
    bp.dy_align = 2;
    return bp;
  };
  EXPECT_FALSE(backward_wants_dense_rows(unaligned(8192)));
  EXPECT_FALSE(backward_unsupported(unaligned(8192)));
  EXPECT_FALSE(make_backward_plan(unaligned(8192)).vector_io);
  EXPECT_TRUE(backward_wants_dense_rows(unaligned(8200)));
  EXPECT_TRUE(backward_looped(unaligned(8200)));  // as it stands, before the copy
  EXPECT_FALSE(backward_wants_dense_rows(backward(DType::kBFloat16, 16384, 4)));  // aligned
  // An empty batch: x, dy and dx have no memory (null addresses); only the weight is read.
  NormBackwardProblem empty = backward(DType::kBFloat16, 12000, 0);
  empty.rows.x_align = empty.dy_align = empty.dx_align = 0;
  EXPECT_FALSE(backward_unsupported(empty));
  EXPECT_TRUE(make_backward_plan(empty).vector_io);
  EXPECT_FALSE(backward_unsupported(unaligned(16383)));  // N not whole chunks: looped
  EXPECT_FALSE(backward_wants_dense_rows(unaligned(16383)));
  EXPECT_TRUE(backward_looped(unaligned(16383)));
}

// Past the cluster (more than 16 slices) and unaligned rows past the element-wise kernel that no
// copy aligns: the looped pair, a 512-thread CTA per row then a thread per column chunk and
// block, on the same weight-gradient blocks as every other plan of (M, N, dtype).
TEST(MakeBackwardPlan, RowsPastTheClusterOrUnalignedPastTheRowKernelLoop) {
  for (const DType x : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    const int64_t slice = x == DType::kFloat32 ? 8192 : 16384;
    for (const int64_t n : {16 * slice + 8, 17 * slice, 64 * slice, int64_t{1} << 22}) {
      for (const int64_t m : {int64_t{0}, int64_t{1}, int64_t{37}, int64_t{4096}}) {
        for (const bool layernorm : {false, true}) {
          const NormBackwardProblem bp =
              layernorm ? layernorm_backward(x, n, m, true, true) : backward(x, n, m);
          ASSERT_FALSE(backward_unsupported(bp)) << n;
          const BackwardPlan plan = make_backward_plan(bp);
          EXPECT_EQ(backward_plan_violation(plan, bp), "");
          EXPECT_TRUE(plan.looped) << n;
          EXPECT_EQ(plan.cluster_ctas, 0);
          EXPECT_EQ(plan.smem_bytes, 0);
          EXPECT_FALSE(plan.prefetch_next_row);
          EXPECT_EQ(plan.block_threads, kBackwardMaxThreads);
          EXPECT_GE(plan.column_tiles * kLoopedColumnThreads, plan.chunks_per_row);
          EXPECT_LT((plan.column_tiles - 1) * kLoopedColumnThreads, plan.chunks_per_row);
          const int acc = x == DType::kFloat32 ? 8 : 4;
          EXPECT_EQ(plan.row_sums_bytes, acc * (layernorm ? 2 : 1));
          const WeightGradBlocks cpu = weight_grad_blocks_for(m, n, x);
          EXPECT_EQ(plan.blocks, cpu.blocks);
          EXPECT_EQ(plan.block_rows, cpu.block_rows);
          // The rows' sums follow the partials in one scratch buffer, 16-byte aligned.
          const int64_t offset = backward_row_sums_offset(plan, bp);
          EXPECT_EQ(offset % 16, 0);
          EXPECT_GE(offset, backward_partials_bytes(plan, bp));
          EXPECT_LT(offset, backward_partials_bytes(plan, bp) + 16);
          EXPECT_EQ(backward_row_sums_total_bytes(plan, bp), m * plan.row_sums_bytes);
        }
      }
    }
  }
  // Unaligned rows: element-wise I/O, looped from 3 chunks a thread (16-bit N > 8192) where N is
  // not whole chunks; the rows the row kernel takes stay there.
  for (const int64_t n : {int64_t{8193}, int64_t{16383}, int64_t{16385}, int64_t{300001}}) {
    NormBackwardProblem bp = backward(DType::kBFloat16, n, 64);
    const BackwardPlan plan = make_backward_plan(bp);
    EXPECT_TRUE(plan.looped) << n;
    EXPECT_FALSE(plan.vector_io) << n;
    EXPECT_EQ(backward_plan_violation(plan, bp), "");
  }
  for (const int64_t n : {int64_t{8191}, int64_t{16384}, int64_t{262144}}) {
    const BackwardPlan plan = make_backward_plan(backward(DType::kBFloat16, n, 64));
    EXPECT_FALSE(plan.looped) << n;
    EXPECT_EQ(plan.column_tiles, 0);
    EXPECT_EQ(plan.row_sums_bytes, 0);
    EXPECT_EQ(backward_row_sums_total_bytes(plan, backward(DType::kBFloat16, n, 64)), 0);
  }
}

TEST(BackwardPlanViolation, CatchesBrokenPlans) {
  struct Broken {
    const char* what;
    NormBackwardProblem made_for, used_for;
    std::function<void(BackwardPlan&)> mutate;
    const char* mentions;  // a word the reason must contain
  };
  const NormBackwardProblem aligned = backward(DType::kBFloat16, 4096, 1000);
  NormBackwardProblem unaligned_dy = aligned;
  unaligned_dy.dy_align = 2;
  NormBackwardProblem without_clusters = backward(DType::kBFloat16, 32768, 64);
  without_clusters.clusters = false;
  const Broken cases[] = {
      {"a cluster plan on a device without", backward(DType::kBFloat16, 32768, 64),
       without_clusters, [](BackwardPlan&) {}, "looped must be"},
      {"threads_per_row halved", aligned, aligned,
       [](BackwardPlan& p) {
         p.threads_per_row /= 2;
         p.chunks_per_thread *= 2;
         p.block_threads /= 2;
       },
       "threads_per_row"},
      {"plan for another N", aligned, backward(DType::kBFloat16, 2048, 1000), [](BackwardPlan&) {},
       "chunks_per_row"},
      {"plan for another M", aligned, backward(DType::kBFloat16, 4096, 100000),
       [](BackwardPlan&) {}, "weight-gradient blocks"},
      {"aligned plan on an unaligned dy", aligned, unaligned_dy, [](BackwardPlan&) {},
       "vector_io needs"},
      {"prefetch without vector I/O", unaligned_dy, unaligned_dy,
       [](BackwardPlan& p) { p.prefetch_next_row = true; }, "no instantiated backward kernel"},
      {"no prefetch at 2 vector chunks (no such kernel)", aligned, aligned,
       [](BackwardPlan& p) { p.prefetch_next_row = false; }, "no instantiated backward kernel"},
      {"prefetch of 4 chunks", backward(DType::kBFloat16, 16384, 10),
       backward(DType::kBFloat16, 16384, 10), [](BackwardPlan& p) { p.prefetch_next_row = true; },
       "no instantiated backward kernel"},
      {"1024 threads", backward(DType::kBFloat16, 16384, 10), backward(DType::kBFloat16, 16384, 10),
       [](BackwardPlan& p) {
         p.threads_per_row = p.block_threads = 1024;
         p.chunks_per_thread = 2;
       },
       "threads_per_row"},
      {"one chunk per thread for two", aligned, aligned,
       [](BackwardPlan& p) { p.chunks_per_thread = 1; }, "chunks_per_thread"},
      {"block_threads not the row's", aligned, aligned,
       [](BackwardPlan& p) { p.block_threads *= 2; }, "block_threads"},
      {"blocks split differently", aligned, aligned,
       [](BackwardPlan& p) {
         p.block_rows *= 2;
         p.blocks = (1000 + p.block_rows - 1) / p.block_rows;
       },
       "weight-gradient blocks"},
      // 256 blocks of 32 rows (a 256-thread CTA's blocks) for 512-thread CTAs.
      {"256 blocks of 512-thread CTAs", backward(DType::kBFloat16, 7168, 8192),
       backward(DType::kBFloat16, 7168, 8192),
       [](BackwardPlan& p) {
         p.block_rows = 32;
         p.blocks = 256;
       },
       "weight-gradient blocks"},
      // 128 blocks of 32 rows (a 512-thread CTA's blocks) for 256-thread CTAs.
      {"128 blocks of 256-thread CTAs", backward(DType::kBFloat16, 4096, 4096),
       backward(DType::kBFloat16, 4096, 4096),
       [](BackwardPlan& p) {
         p.block_rows = 32;
         p.blocks = 128;
       },
       "weight-gradient blocks"},
      {"float partials for float32 rows", backward(DType::kFloat32, 4096, 10),
       backward(DType::kFloat32, 4096, 10), [](BackwardPlan& p) { p.partial_bytes = 4; },
       "partials are float"},
      {"reduction misses columns", aligned, aligned, [](BackwardPlan& p) { p.reduce_grid -= 1; },
       "cover every column"},
      {"a looped row in a cluster", backward(DType::kBFloat16, 262152, 64),
       backward(DType::kBFloat16, 262152, 64),
       [](BackwardPlan& p) {
         p.looped = false;
         p.column_tiles = p.row_sums_bytes = 0;
       },
       "looped must be"},
      {"a looped row's columns uncovered", backward(DType::kBFloat16, 262152, 64),
       backward(DType::kBFloat16, 262152, 64), [](BackwardPlan& p) { p.column_tiles -= 1; },
       "a looped plan runs"},
      {"a looped row's sums of the wrong size", backward(DType::kBFloat16, 262152, 64),
       backward(DType::kBFloat16, 262152, 64), [](BackwardPlan& p) { p.row_sums_bytes = 8; },
       "a looped plan runs"},
      {"a looped row of 256 threads", backward(DType::kBFloat16, 262152, 64),
       backward(DType::kBFloat16, 262152, 64), [](BackwardPlan& p) { p.block_threads = 256; },
       "a looped plan runs"},
      {"a looped row in a cluster too", backward(DType::kBFloat16, 262152, 64),
       backward(DType::kBFloat16, 262152, 64), [](BackwardPlan& p) { p.cluster_ctas = 17; },
       "a looped plan runs"},
      {"row sums for a cluster row", backward(DType::kBFloat16, 32768, 64),
       backward(DType::kBFloat16, 32768, 64), [](BackwardPlan& p) { p.row_sums_bytes = 4; },
       "looped plan's"},
      {"column tiles for a short row", aligned, aligned,
       [](BackwardPlan& p) { p.column_tiles = 1; }, "looped plan's"},
      {"a cluster row looped", backward(DType::kBFloat16, 32768, 64),
       backward(DType::kBFloat16, 32768, 64),
       [](BackwardPlan& p) {
         p.looped = true;
         p.cluster_ctas = p.smem_bytes = 0;
         p.column_tiles = 8;
         p.row_sums_bytes = 4;
       },
       "looped must be"},
      {"a one-slice plan for a long row", backward(DType::kBFloat16, 16384, 64),
       backward(DType::kBFloat16, 16392, 64), [](BackwardPlan& p) { p.chunks_per_row += 1; },
       "covering the row"},
      {"a long row without its cluster", backward(DType::kBFloat16, 32768, 64),
       backward(DType::kBFloat16, 32768, 64), [](BackwardPlan& p) { p.cluster_ctas = 0; },
       "a cluster of one CTA per slice"},
      {"a long row's slices miscounted", backward(DType::kBFloat16, 32768, 64),
       backward(DType::kBFloat16, 32768, 64),
       [](BackwardPlan& p) {
         p.slices = 4;
         p.cluster_ctas = 4;
       },
       "slices_for"},
      {"a cluster for a short row", aligned, aligned, [](BackwardPlan& p) { p.cluster_ctas = 1; },
       "without a cluster"},
      {"a long row without its staging buffers", backward(DType::kBFloat16, 32768, 64),
       backward(DType::kBFloat16, 32768, 64), [](BackwardPlan& p) { p.smem_bytes = 0; },
       "smem_bytes"},
      {"staging buffers for a short row", aligned, aligned,
       [](BackwardPlan& p) { p.smem_bytes = kBackwardClusterSmemBytes; }, "smem_bytes"},
      {"a long row's blocks of one CTA", backward(DType::kBFloat16, 65536, 4096),
       backward(DType::kBFloat16, 65536, 4096),
       [](BackwardPlan& p) {
         p.block_rows = 32;
         p.blocks = 128;
       },
       "weight-gradient blocks"},
      {"chunk not 16 bytes", aligned, aligned, [](BackwardPlan& p) { p.chunk_elems = 4; },
       "16 bytes"},
  };
  for (const Broken& b : cases) {
    BackwardPlan plan = make_backward_plan(b.made_for);
    ASSERT_EQ(backward_plan_violation(plan, b.made_for), "") << b.what;
    b.mutate(plan);
    const std::string why = backward_plan_violation(plan, b.used_for);
    EXPECT_NE(why.find(b.mentions), std::string::npos) << b.what << ": " << why;
  }
  // Problems the kernels do not take: LayerNorm with a 16-bit weight, RMSNorm with a bias.
  NormBackwardProblem bf16_weight_layernorm = backward(DType::kBFloat16, 4096, 1000);
  bf16_weight_layernorm.rows.op = NormOp::kLayerNorm;
  EXPECT_NE(backward_plan_violation(make_backward_plan(aligned), bf16_weight_layernorm)
                .find("float32 weight"),
            std::string::npos);
  NormBackwardProblem rms_with_bias = aligned;
  rms_with_bias.rows.has_bias = true;
  EXPECT_NE(backward_plan_violation(make_backward_plan(aligned), rms_with_bias).find("bias"),
            std::string::npos);
  // Float64 rows: the CPU's alone, so no CUDA plan is valid for them.
  EXPECT_NE(backward_plan_violation(make_backward_plan(aligned), backward(DType::kFloat64, 4096, 8))
                .find("CPU only"),
            std::string::npos);
  // The blocks' own check names them (the fields before it are the problem's).
  const NormBackwardProblem wide = backward(DType::kBFloat16, 7168, 8192);
  BackwardPlan plan = make_backward_plan(wide);
  EXPECT_EQ(plan.block_rows, 64);
  EXPECT_EQ(plan.blocks, 128);
  plan.block_rows = 32;
  plan.blocks = 256;
  EXPECT_NE(backward_plan_violation(plan, wide).find("weight-gradient blocks"), std::string::npos)
      << backward_plan_violation(plan, wide);
}

}  // namespace
}  // namespace oink
