// What a normalization call asks for, and what the device offers: the two inputs of make_plan().
// Host-only, torch-free, CUDA-free, so that planning is testable on any machine.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace oink {

enum class NormOp : uint8_t {
  kRmsNorm,          // out = rmsnorm(x)
  kFusedAddRmsNorm,  // residual = x + residual; x = rmsnorm(residual)   (vLLM semantics)
};

constexpr const char* op_name(NormOp op) {
  return op == NormOp::kRmsNorm ? "rmsnorm" : "fused_add_rms_norm";
}

// One call, described by what decides the schedule. Row strides are in elements, 64-bit.
struct NormProblem {
  NormOp op = NormOp::kRmsNorm;
  DType x_dtype = DType::kBFloat16;  // also the dtype of out and residual
  DType w_dtype = DType::kBFloat16;  // ignored when has_weight is false
  bool has_weight = true;
  int64_t rows = 0;         // M
  int64_t cols = 0;         // N
  int64_t ld_x = 0;         // row stride of x                                 (>= N when M > 1)
  int64_t ld_out = 0;       // row stride of out (rmsnorm) — equal to ld_x for oink's own outputs
  int64_t ld_residual = 0;  // row stride of residual (fused op only)
  // Largest power of two (capped at 256) dividing each base address; 0 = absent.
  int x_align = 256, out_align = 256, residual_align = 256, w_align = 256;
};

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

}  // namespace oink
