// The reduce-then-map row ops (softmax, its backward, cross-entropy and its backward): each row is
// read, reduced to a few statistics, and mapped to its outputs. What one call asks for
// (ReduceProblem), its pointers (ReduceArgs), and each op's traits as data (kReduceOps): the
// planner, the CPU kernels and the CUDA kernels read the op's row of that table, never its name.
// Host-only, torch-free, CUDA-free.
//
// A new op of this family is: an enumerator and a row of kReduceOps here, its row type (CPU:
// cpu/<op>_cpu.cpp; CUDA: kernels/<op>_row.cuh, instantiated by kernels/row_reduce.cu), a schema
// line (torch/registration.cpp) and its tests.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/rows.h"

namespace oink {

enum class ReduceOp : uint8_t {
  kSoftmax,               // y = exp(x - max) / sum(exp(x - max)) over the row
  kSoftmaxBackward,       // dx = y * (dy - sum(dy * y)); in = dy, in2 = y
  kCrossEntropy,          // per row: loss, lse (and, when asked, dlogits for a per-row scale)
  kCrossEntropyBackward,  // dlogits = (softmax(z) - smoothed one-hot) * dloss[row] * dz/dx
  kScaleGradient,         // g *= s, s one value on g's device: the fused gradient's upstream
                          // gradient; nothing is read or written where s == 1
};

// What tells one op of the family apart, as data.
struct ReduceOpTraits {
  ReduceOp op;
  const char* name;
  int streams_in;      // row streams read: 1 (x, logits) or 2 (dy and y)
  bool reduces;        // false: a pure map of the row and per-row values (the CE backward)
  int max_chunks;      // the most 16-byte chunks per stream a thread keeps in registers
  bool takes_targets;  // int64 targets[M] and the cross-entropy options (ReduceArgs)
};

// clang-format off
inline constexpr ReduceOpTraits kReduceOps[] = {
//   op                              name                     streams reduces chunks targets
    {ReduceOp::kSoftmax,              "softmax",                1,     true,   4,     false},
    {ReduceOp::kSoftmaxBackward,      "softmax_backward",       2,     true,   2,     false},
    // 2: at 4 element-wise float16 chunks with the fused gradient, ptxas spilled on Blackwell
    {ReduceOp::kCrossEntropy,         "cross_entropy",          1,     true,   2,     true},
    {ReduceOp::kCrossEntropyBackward, "cross_entropy_backward", 1,     false,  4,     true},
    {ReduceOp::kScaleGradient,        "scale_gradient_",        1,     false,  4,     false},
};
// clang-format on

constexpr const ReduceOpTraits& traits_of(ReduceOp op) { return kReduceOps[static_cast<int>(op)]; }

constexpr bool reduce_ops_in_order() {
  for (int i = 0; i < static_cast<int>(sizeof(kReduceOps) / sizeof(kReduceOps[0])); ++i) {
    if (static_cast<int>(kReduceOps[i].op) != i) return false;
  }
  return true;
}
static_assert(reduce_ops_in_order(), "kReduceOps is indexed by ReduceOp");

// One call. Strides are in elements, 64-bit, over row_dims (core/rows.h): `in` is x (softmax),
// dy (softmax backward), the logits or the gradient (scale_gradient_); `in2` is y (softmax
// backward only); `out` is y, dx or dlogits, and may be `in` itself (the in-place gradient: each
// element is read before the same thread writes it; scale_gradient_ is always in place). The
// cross-entropy ops take 2-D logits [M, V] (row_dims.count == 1).
struct ReduceProblem {
  ReduceOp op = ReduceOp::kSoftmax;
  DType dtype = DType::kBFloat16;  // every row stream's (in, in2, out)
  int64_t rows = 0;                // M
  int64_t cols = 0;                // N (the vocabulary V for cross-entropy)
  RowDims row_dims;
  RowStrides in_strides, in2_strides, out_strides;
  // Largest power of two (capped at 256) dividing each base address; 0 = absent.
  int in_align = 256, in2_align = 256, out_align = 256;
  // Cross-entropy: whether the row also writes dlogits (out; the forward's fused gradient), and
  // which options are on (they select the row type's instantiation, not a run-time branch).
  bool writes_rows = true;  // false: cross_entropy without the fused gradient (loss and lse only)
  bool label_smoothing = false;
  bool softcap = false;
};

// The pointers and scalars of one call (sizes and strides: ReduceProblem).
struct ReduceArgs {
  const void* in = nullptr;
  const void* in2 = nullptr;
  void* out = nullptr;
  // Cross-entropy. Per-row values are float32, float64 for float64 rows (CPU only).
  const int64_t* target = nullptr;  // [M]
  int64_t ignore_index = -100;
  float label_smoothing = 0.f;  // epsilon in [0, 1]
  float softcap = 0.f;          // c > 0: z = c * tanh(x / c); 0: z = x
  void* loss = nullptr;         // [M], written by the forward
  void* lse = nullptr;          // [M], written by the forward, read by the backward
  // The backward: the upstream gradient of each row's loss, [M]. The forward's fused gradient:
  // one scale for every non-ignored row (1 / count for a mean), a scalar on the rows' device, or
  // nullptr for 1; scale_gradient_'s factor s, the same (never nullptr), which may also be in the
  // rows' own dtype (autograd's seed of a 16-bit loss, read without a cast's launch).
  const void* dloss = nullptr;
  const void* grad_scale = nullptr;
  bool grad_scale_in_rows_dtype = false;
};

}  // namespace oink
