// Every schema of the oink library, with its mutation marks. Implementations register next to
// their checks (rmsnorm_ops.cpp); fake kernels in python/oink/_fake.py.
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY(oink, m) {
  // y = x * rsqrt(mean(x^2) + eps) * weight, float32 math, output with x's shape and strides.
  m.def("rmsnorm(Tensor x, Tensor? weight, float eps) -> Tensor");
  // In place, vLLM semantics: residual <- x + residual; x <- rmsnorm(residual, weight, eps).
  m.def("fused_add_rms_norm(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps) -> ()");
  // The launch plan a call would use, as `key=value` pairs (oink.explain parses it).
  m.def(
      "explain(str op, Tensor x, Tensor? weight=None, Tensor? residual=None, float eps=1e-6) -> "
      "str");
  // Whether later launches may use programmatic dependent launch (default true; sm_90+ only).
  // Returns the previous setting. A process-wide choice, read when a call is planned.
  m.def("set_pdl(bool enabled) -> bool");
}
