// The chunking of oink.linear_cross_entropy: how many rows of the hidden states go through the
// logits GEMM, the cross-entropy kernel (its gradient written in place over the chunk's logits)
// and the two gradient GEMMs at a time. A pure function of the sizes, tested on any machine and
// shown by oink.explain("linear_cross_entropy", ...).
#pragma once

#include <cstdint>
#include <string>

namespace oink {

// Bytes of one chunk's logits the rule aims at: the peak the loss adds beyond its inputs and
// gradients. 256 MiB is 1024 rows of a 128K vocabulary in bf16: large enough that the GEMMs of
// a chunk keep the GPU busy (a [1024, 4096] x [4096, 128K] GEMM is ~1 TFLOP), small enough to
// be a few percent of the [M, V] logits the unfused loss holds at M = 16K.
inline constexpr int64_t kLinearCeChunkBytes = int64_t{256} << 20;
// Fewer rows than this make the GEMMs inefficient whatever the vocabulary.
inline constexpr int64_t kLinearCeMinChunkRows = 128;

struct LinearCePlan {
  int64_t chunk_rows = 0;  // rows per chunk (the last chunk may be shorter)
  int64_t chunks = 0;      // ceil(rows / chunk_rows)
  int64_t chunk_logits_bytes = 0;
};

// rows M, vocabulary V, hidden H, bytes per element of the logits (the hidden states' dtype).
// chunk_rows: the largest power of two whose logits fit kLinearCeChunkBytes, at least
// kLinearCeMinChunkRows, at most M (then one chunk). Throws std::invalid_argument for sizes < 0
// or elem_bytes not 2, 4 or 8.
LinearCePlan plan_linear_ce(int64_t rows, int64_t vocab, int64_t hidden, int elem_bytes);

// "linear_cross_entropy chunks=16 x 1024 rows (256 MiB of logits each)".
std::string describe(const LinearCePlan& plan);

}  // namespace oink
