#include "core/linear_ce_plan.h"

#include <algorithm>
#include <stdexcept>

namespace oink {

LinearCePlan plan_linear_ce(int64_t rows, int64_t vocab, int64_t hidden, int elem_bytes) {
  if (rows < 0 || vocab < 0 || hidden < 0) {
    throw std::invalid_argument("plan_linear_ce: sizes must be >= 0");
  }
  if (elem_bytes != 2 && elem_bytes != 4 && elem_bytes != 8) {
    throw std::invalid_argument("plan_linear_ce: elem_bytes must be 2, 4 or 8");
  }
  LinearCePlan plan;
  if (rows == 0) return plan;
  const int64_t row_bytes = std::max<int64_t>(vocab, 1) * elem_bytes;
  int64_t chunk = kLinearCeMinChunkRows;
  while (2 * chunk * row_bytes <= kLinearCeChunkBytes) chunk *= 2;
  plan.chunk_rows = std::min(chunk, rows);
  plan.chunks = (rows + plan.chunk_rows - 1) / plan.chunk_rows;
  plan.chunk_logits_bytes = plan.chunk_rows * vocab * elem_bytes;
  return plan;
}

std::string describe(const LinearCePlan& plan) {
  const int64_t mib = plan.chunk_logits_bytes >> 20;
  return "linear_cross_entropy chunks=" + std::to_string(plan.chunks) + " x " +
         std::to_string(plan.chunk_rows) + " rows (" +
         (mib > 0 ? std::to_string(mib) + " MiB" : std::to_string(plan.chunk_logits_bytes) + " B") +
         " of logits each)";
}

}  // namespace oink
