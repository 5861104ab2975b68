// Pointers and scalars of one call, shared by the CPU and CUDA kernels (the CPU's LayerNorm has
// its own, cpu/layernorm_cpu.h). Sizes and strides live in NormProblem. For the fused op `out` is
// `x` (normalised in place) and `residual` is updated.
#pragma once

namespace oink {

struct NormArgs {
  const void* x = nullptr;       // [M, N], row stride problem.ld_x
  void* out = nullptr;           // [M, N], row stride problem.ld_out
  void* residual = nullptr;      // [M, N], row stride problem.ld_residual; fused op only
  const void* weight = nullptr;  // [N] contiguous, or nullptr for no scaling
  float eps = 0.f;
  // [M] 1/rms per row (float32; float64 for float64 rows, CPU only), or nullptr: rmsnorm_forward
  // (NormProblem::saves_stats)
  void* rstd = nullptr;
  // LayerNorm on CUDA: [M] means (float32), saved as rstd; and the [N] bias, of the weight's
  // dtype (NormProblem::w_dtype), or nullptr.
  void* mean = nullptr;
  const void* bias = nullptr;
};

}  // namespace oink
