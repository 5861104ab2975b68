// Pointers and scalars of one call, shared by the CPU and CUDA kernels. Sizes and strides live in
// NormProblem. For the fused op `out` is `x` (normalised in place) and `residual` is updated.
#pragma once

namespace oink {

struct NormArgs {
  const void* x = nullptr;       // [M, N], row stride problem.ld_x
  void* out = nullptr;           // [M, N], row stride problem.ld_out
  void* residual = nullptr;      // [M, N], row stride problem.ld_residual; fused op only
  const void* weight = nullptr;  // [N] contiguous, or nullptr for no scaling
  float eps = 0.f;
  // [M] 1/rms per row (float32; float64 for float64 rows, CPU only), or nullptr: rmsnorm_forward
  // (NormProblem::saves_rstd)
  void* rstd = nullptr;
};

}  // namespace oink
