// The backward passes' weight-gradient blocks and the CUDA backward plan: the blocks depend
// on M alone and cover every row once; the plan keeps the forward's reduction lanes, takes
// vector I/O exactly when every stream is aligned, refuses what its kernel cannot run with a
// sentence naming N, and backward_plan_violation catches broken plans.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

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

TEST(WeightGradBlocks, DependOnMAloneAndCoverEveryRowOnce) {
  EXPECT_EQ(weight_grad_blocks(0), 1);  // one block of zero partials: a zero gradient
  EXPECT_EQ(weight_grad_blocks(1), 1);
  EXPECT_EQ(weight_grad_blocks(32), 1);
  EXPECT_EQ(weight_grad_blocks(33), 2);
  EXPECT_EQ(weight_grad_blocks(256 * 32), 256);
  for (int64_t m = 1; m < (int64_t{1} << 24); m = m * 3 + 1) {
    const int64_t rows = weight_grad_block_rows(m), blocks = weight_grad_blocks(m);
    EXPECT_GE(rows, kMinWeightGradBlockRows);
    EXPECT_LE(blocks, kMaxWeightGradBlocks) << m;
    EXPECT_GE(blocks * rows, m) << m;        // every row in a block
    EXPECT_LT((blocks - 1) * rows, m) << m;  // no empty block (but M = 0's one)
  }
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
        EXPECT_EQ(plan.blocks, weight_grad_blocks(m));
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
  EXPECT_FALSE(backward_unsupported(backward(DType::kBFloat16, 16384, 4)));
  const auto long_row = backward_unsupported(backward(DType::kBFloat16, 16392, 4));
  ASSERT_TRUE(long_row);
  EXPECT_NE(long_row->find("N=16392"), std::string::npos) << *long_row;
  EXPECT_NE(long_row->find("N <= 16384"), std::string::npos) << *long_row;
  const auto long_float = backward_unsupported(backward(DType::kFloat32, 8200, 4));
  ASSERT_TRUE(long_float);
  EXPECT_NE(long_float->find("N <= 8192"), std::string::npos) << *long_float;
  EXPECT_TRUE(backward_unsupported(backward(DType::kFloat64, 64, 4)));
}

// Unaligned rows take the element-wise kernel, up to 2 chunks a thread (16-bit N <= 8192); longer
// ones are copied into dense, aligned tensors when N is whole chunks, and refused otherwise.
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
    // The longest rows take 4 chunks a thread.
    EXPECT_EQ(make_backward_plan(layernorm_backward(x, limit, 64, true, true)).chunks_per_thread,
              kBackwardMaxChunksPerThread);
    const auto why = backward_unsupported(layernorm_backward(x, limit + 8, 4, true, true));
    ASSERT_TRUE(why);
    EXPECT_NE(why->find("N <= " + std::to_string(limit)), std::string::npos) << *why;
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
  EXPECT_TRUE(backward_unsupported(unaligned(8200)));  // as it stands, before the copy
  EXPECT_FALSE(backward_wants_dense_rows(backward(DType::kBFloat16, 16384, 4)));  // aligned
  // An empty batch: x, dy and dx have no memory (null addresses); only the weight is read.
  NormBackwardProblem empty = backward(DType::kBFloat16, 12000, 0);
  empty.rows.x_align = empty.dy_align = empty.dx_align = 0;
  EXPECT_FALSE(backward_unsupported(empty));
  EXPECT_TRUE(make_backward_plan(empty).vector_io);
  const auto odd = backward_unsupported(unaligned(16383));
  ASSERT_TRUE(odd);
  EXPECT_FALSE(backward_wants_dense_rows(unaligned(16383)));
  EXPECT_NE(odd->find("N=16383"), std::string::npos) << *odd;
  EXPECT_NE(odd->find("multiple of 8"), std::string::npos) << *odd;
}

TEST(BackwardPlanViolation, CatchesBrokenPlans) {
  struct Broken {
    const char* what;
    NormBackwardProblem made_for, used_for;
    std::function<void(BackwardPlan&)> mutate;
  };
  const NormBackwardProblem aligned = backward(DType::kBFloat16, 4096, 1000);
  NormBackwardProblem unaligned_dy = aligned;
  unaligned_dy.dy_align = 2;
  const Broken cases[] = {
      {"threads_per_row halved", aligned, aligned,
       [](BackwardPlan& p) {
         p.threads_per_row /= 2;
         p.chunks_per_thread *= 2;
         p.block_threads /= 2;
       }},
      {"plan for another N", aligned, backward(DType::kBFloat16, 2048, 1000), [](BackwardPlan&) {}},
      {"plan for another M", aligned, backward(DType::kBFloat16, 4096, 100000),
       [](BackwardPlan&) {}},
      {"aligned plan on an unaligned dy", aligned, unaligned_dy, [](BackwardPlan&) {}},
      {"prefetch without vector I/O", unaligned_dy, unaligned_dy,
       [](BackwardPlan& p) { p.prefetch_next_row = true; }},
      {"no prefetch at 2 vector chunks (no such kernel)", aligned, aligned,
       [](BackwardPlan& p) { p.prefetch_next_row = false; }},
      {"prefetch of 4 chunks", backward(DType::kBFloat16, 16384, 10),
       backward(DType::kBFloat16, 16384, 10), [](BackwardPlan& p) { p.prefetch_next_row = true; }},
      {"1024 threads", backward(DType::kBFloat16, 16384, 10), backward(DType::kBFloat16, 16384, 10),
       [](BackwardPlan& p) {
         p.threads_per_row = p.block_threads = 1024;
         p.chunks_per_thread = 2;
       }},
      {"one chunk per thread for two", aligned, aligned,
       [](BackwardPlan& p) { p.chunks_per_thread = 1; }},
      {"block_threads not the row's", aligned, aligned,
       [](BackwardPlan& p) { p.block_threads *= 2; }},
      {"blocks split differently", aligned, aligned,
       [](BackwardPlan& p) {
         p.block_rows *= 2;
         p.blocks = (1000 + p.block_rows - 1) / p.block_rows;
       }},
      {"float partials for float32 rows", backward(DType::kFloat32, 4096, 10),
       backward(DType::kFloat32, 4096, 10), [](BackwardPlan& p) { p.partial_bytes = 4; }},
      {"reduction misses columns", aligned, aligned, [](BackwardPlan& p) { p.reduce_grid -= 1; }},
      {"a plan for a row too long", aligned, backward(DType::kBFloat16, 32768, 1000),
       [](BackwardPlan&) {}},
  };
  for (const Broken& b : cases) {
    BackwardPlan plan = make_backward_plan(b.made_for);
    ASSERT_EQ(backward_plan_violation(plan, b.made_for), "") << b.what;
    b.mutate(plan);
    EXPECT_NE(backward_plan_violation(plan, b.used_for), "") << b.what;
  }
}

}  // namespace
}  // namespace oink
