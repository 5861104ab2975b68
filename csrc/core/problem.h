// What a normalization call asks for, and what the device offers: the two inputs of make_plan().
// Host-only, torch-free, CUDA-free, so that planning is testable on any machine.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/rows.h"

namespace oink {

enum class NormOp : uint8_t {
  kRmsNorm,          // out = rmsnorm(x)
  kFusedAddRmsNorm,  // residual = x + residual; x = rmsnorm(residual)   (vLLM semantics)
  kLayerNorm,        // out = layernorm(x, weight, bias)
};

// The row operations of one instantiation set of CUDA kernels (core/kernel_table.h). RMSNorm and
// rmsnorm_forward (which saves rstd) share one set (the op type differs, the entries not); so do
// LayerNorm and layernorm_forward.
enum class KernelOps : uint8_t { kRmsNorm, kFusedAdd, kLayerNorm };

// What tells the norm ops apart for the planner, as data: make_plan and plan_violation read the
// op's row, never its name.
struct NormOpTraits {
  NormOp op;
  const char* name;
  int streams;          // row streams a row loads: x, or x and the residual
  bool adds_residual;   // writes x and the residual in place (the fused op)
  bool two_reductions;  // the mean, then the squared deviations (no folded register lanes)
  bool saves_stats;     // has the form that saves its statistics (rmsnorm_forward, ...)
  bool has_bias;        // may add a bias
  bool two_pass_rows;   // long rows no cluster takes run two_pass (else cuda_forward_unsupported)
  bool streamed;        // the streamed kernel, and the cluster holding half a wider weight
  bool holds_weight;    // tile and cluster threads hold weight chunks in registers
  KernelOps kernel_ops;
};

// clang-format off
inline constexpr NormOpTraits kNormOps[] = {
//   op                         name                  streams residual 2 red. stats  bias   2-pass streamed holds  kernels
    {NormOp::kRmsNorm,          "rmsnorm",            1,      false,   false, true,  false, true,  true,    true,  KernelOps::kRmsNorm},
    {NormOp::kFusedAddRmsNorm,  "fused_add_rms_norm", 2,      true,    false, false, false, true,  false,   true,  KernelOps::kFusedAdd},
    {NormOp::kLayerNorm,        "layernorm",          1,      false,   true,  true,  true,  false, false,   false, KernelOps::kLayerNorm},
};
// clang-format on

constexpr const NormOpTraits& traits_of(NormOp op) { return kNormOps[static_cast<int>(op)]; }
static_assert(kNormOps[0].op == NormOp::kRmsNorm && kNormOps[1].op == NormOp::kFusedAddRmsNorm &&
                  kNormOps[2].op == NormOp::kLayerNorm,
              "kNormOps is indexed by NormOp");

constexpr const char* op_name(NormOp op) { return traits_of(op).name; }

// One call, described by what decides the schedule. Strides are in elements, 64-bit.
struct NormProblem {
  NormOp op = NormOp::kRmsNorm;
  DType x_dtype = DType::kBFloat16;  // also the dtype of out and residual
  DType w_dtype = DType::kBFloat16;  // ignored when has_weight and has_bias are false
  bool has_weight = true;
  // layernorm only: a bias is added, of w_dtype (NormArgs::bias: the binding gives the weight and
  // the bias one dtype on CUDA).
  bool has_bias = false;
  // rmsnorm_forward, layernorm_forward: the op that also writes each row's statistics
  // (NormArgs::rstd; layernorm: and mean). Same plan, same bits in out.
  bool saves_stats = false;
  int64_t rows = 0;  // M
  int64_t cols = 0;  // N
  // The leading dimensions of x, out (rmsnorm) and residual (fused op), coalesced together, and
  // each tensor's strides over them. One dimension (the common case): s[0] is the row stride.
  RowDims row_dims;
  RowStrides x_strides, out_strides, residual_strides;
  // Largest power of two (capped at 256) dividing each base address; 0 = absent.
  int x_align = 256, out_align = 256, residual_align = 256, w_align = 256, bias_align = 256;

  // Rows with one stride each: row r of x at r * ld_x() (and so on).
  int64_t ld_x() const { return x_strides.s[0]; }
  // The tensor the op writes its normalised rows to: out, or x itself for the fused op.
  const RowStrides& written_strides() const {
    return traits_of(op).adds_residual ? x_strides : out_strides;
  }
};

// The same strides for every tensor of a problem with rows of one stride `ld` (tests and tools).
inline void set_row_stride(NormProblem& p, int64_t ld) {
  p.row_dims = RowDims{};
  p.row_dims.size[0] = p.rows;
  p.x_strides = p.out_strides = p.residual_strides = RowStrides{{ld}};
}

// The device a plan is made for. Read from the device by the binding, never hard-coded.
struct DeviceInfo {
  int cc_major = 0;  // 0 = CPU
  int cc_minor = 0;
  int sm_count = 0;
  int max_threads_per_sm = 2048;
  int max_blocks_per_sm = 32;
  int max_smem_per_block = 48 * 1024;  // opt-in limit, bytes
  int max_smem_per_sm = 0;             // bytes; 0: unknown (no shared-memory schedules)
  int reserved_smem_per_block = 1024;  // bytes the driver keeps per resident CTA
  int registers_per_sm = 64 * 1024;    // 32-bit registers

  bool is_cuda() const { return cc_major > 0; }
};

// Caller's choices that are not properties of the call or the device (oink.set_pdl()).
struct LaunchOptions {
  bool allow_pdl = true;  // programmatic dependent launch where the device has it (sm_90+)
};

// Alignment helper for the binding: largest power of two dividing `address`, capped at 256.
inline int pointer_alignment(const void* address) {
  const auto a = reinterpret_cast<uintptr_t>(address);
  if (a == 0) return 0;
  int align = 1;
  while (align < 256 && (a % (2 * align)) == 0) align *= 2;
  return align;
}

// A backward call's rows: x's problem (rows, cols, dtypes, row dimensions, x_strides), with the
// upstream gradient dy's and the result dx's strides over the same row dimensions.
struct NormBackwardProblem {
  NormProblem rows;
  RowStrides dy_strides, dx_strides;
  int dy_align = 256, dx_align = 256;  // as NormProblem's alignments
  // The device runs the cluster backward (backward_clusters_on): rows of 2 to 16 slices take it
  // there, the looped backward elsewhere.
  bool clusters = true;
};

}  // namespace oink
