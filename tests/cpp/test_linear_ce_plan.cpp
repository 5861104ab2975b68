// The chunk rule of oink.linear_cross_entropy (core/linear_ce_plan.h).
#include <gtest/gtest.h>

#include <stdexcept>

#include "core/linear_ce_plan.h"

namespace oink {
namespace {

TEST(LinearCePlan, ChunksCoverTheRowsWithinTheBudget) {
  for (int64_t rows : {1, 7, 128, 1000, 4096, 16384, 65537}) {
    for (int64_t vocab : {1, 32000, 128256, 151936, 256000, 1 << 22}) {
      for (int elem : {2, 4}) {
        const LinearCePlan p = plan_linear_ce(rows, vocab, 4096, elem);
        ASSERT_GE(p.chunk_rows, 1);
        ASSERT_LE(p.chunk_rows, rows);
        EXPECT_GE(p.chunk_rows * p.chunks, rows);
        EXPECT_LT((p.chunks - 1) * p.chunk_rows, rows);  // no empty chunk
        EXPECT_EQ(p.chunk_logits_bytes, p.chunk_rows * vocab * elem);
        // Within the budget unless the minimum chunk (or M itself) is already over it.
        if (p.chunk_rows > kLinearCeMinChunkRows) {
          EXPECT_LE(p.chunk_logits_bytes, kLinearCeChunkBytes);
        }
        // Rows beyond the minimum: the largest power of two that fits (doubling would not).
        if (p.chunk_rows < rows && p.chunk_rows > kLinearCeMinChunkRows) {
          EXPECT_EQ(p.chunk_rows & (p.chunk_rows - 1), 0);
          EXPECT_GT(2 * p.chunk_rows * vocab * elem, kLinearCeChunkBytes);
        }
      }
    }
  }
}

TEST(LinearCePlan, Llama3AndQwen3Sizes) {
  // 128256 x 2 bytes: 1024 rows fit 256 MiB (250.5 MiB), 2048 do not.
  EXPECT_EQ(plan_linear_ce(16384, 128256, 4096, 2).chunk_rows, 1024);
  EXPECT_EQ(plan_linear_ce(16384, 128256, 4096, 2).chunks, 16);
  EXPECT_EQ(plan_linear_ce(16384, 151936, 4096, 2).chunk_rows, 512);
  EXPECT_EQ(plan_linear_ce(300, 128256, 4096, 2).chunk_rows, 300);  // one chunk
  EXPECT_EQ(plan_linear_ce(300, 128256, 4096, 2).chunks, 1);
  EXPECT_EQ(plan_linear_ce(0, 128256, 4096, 2).chunks, 0);
}

TEST(LinearCePlan, RejectsBadSizes) {
  EXPECT_THROW(plan_linear_ce(-1, 10, 10, 2), std::invalid_argument);
  EXPECT_THROW(plan_linear_ce(10, 10, 10, 3), std::invalid_argument);
}

TEST(LinearCePlan, Describes) {
  EXPECT_EQ(describe(plan_linear_ce(16384, 128256, 4096, 2)),
            "linear_cross_entropy chunks=16 x 1024 rows (250 MiB of logits each)");
}

}  // namespace
}  // namespace oink
