// Every schema of the oink library, with its mutation marks. Implementations register next to
// their checks (rmsnorm_ops.cpp); fake kernels in python/oink/_fake.py.
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY(oink, m) {
  // y = x * rsqrt(mean(x^2) + eps) * weight, float32 math, rounded once. The output has x's shape
  // and strides when x's rows have one row stride, else it is dense (python/oink/_fake.py).
  m.def("rmsnorm(Tensor x, Tensor? weight, float eps) -> Tensor");
  // The same into a caller's tensor (any leading strides, last dimension contiguous).
  m.def("rmsnorm.out(Tensor x, Tensor? weight, float eps, *, Tensor(a!) out) -> Tensor(a!)");
  // rmsnorm, also returning rstd = 1/rms per row (x.shape[:-1], float32; float64 for float64 x),
  // the statistic rmsnorm_backward takes. CPU and CUDA.
  m.def("rmsnorm_forward(Tensor x, Tensor? weight, float eps) -> (Tensor, Tensor)");
  // (dx, dweight) for the upstream gradient dy; dweight has the weight's dtype (None without a
  // weight) and is summed in a fixed order (deterministic). CPU and CUDA (N <= 16384).
  m.def("rmsnorm_backward(Tensor dy, Tensor x, Tensor? weight, Tensor rstd) -> (Tensor, Tensor?)");
  // y = (x - mean) / sqrt(var + eps) * weight + bias, the mean and the biased variance over the
  // last dimension, rounded once: float64 on the CPU; on CUDA as rmsnorm (N <= 16384).
  m.def("layernorm(Tensor x, Tensor? weight, Tensor? bias, float eps) -> Tensor");
  // layernorm, also returning the mean and rstd of every row (x.shape[:-1], float32; float64
  // for float64 x), the statistics layernorm_backward takes.
  m.def(
      "layernorm_forward(Tensor x, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, "
      "Tensor)");
  // (dx, dweight, dbias) for the upstream gradient dy; dweight and dbias in the weight's and
  // bias's dtypes (None where there is none), summed in a fixed order (deterministic).
  m.def(
      "layernorm_backward(Tensor dy, Tensor x, Tensor? weight, Tensor? bias, Tensor mean, "
      "Tensor rstd) -> (Tensor, Tensor?, Tensor?)");
  // In place, vLLM semantics: residual <- x + residual; x <- rmsnorm(residual, weight, eps).
  m.def("fused_add_rms_norm(Tensor(a!) x, Tensor(b!) residual, Tensor? weight, float eps) -> ()");
  // The names vLLM's own `oink` IR provider (vllm/kernels/oink_ops.py, Blackwell only) checks
  // for and calls: the same ops under those names.
  m.def("rms_norm(Tensor x, Tensor? weight, float eps) -> Tensor");
  m.def("fused_add_rms_norm_(Tensor(a!) x, Tensor(b!) residual, Tensor? weight, float eps) -> ()");
  // y = softmax(x) over the last dimension, float32 math with the row's max subtracted, rounded
  // once; y has x's shape, and x's strides when x's rows have one row stride.
  m.def("softmax(Tensor x) -> Tensor");
  // dx = y * (dy - sum(dy * y)) over the last dimension (dy and y: one dtype, device, shape).
  m.def("softmax_backward(Tensor dy, Tensor y) -> Tensor");
  // Cross-entropy of logits [M, V] against int64 targets [M]: per row (loss, lse), float32
  // (float64 for float64 logits). z = softcap * tanh(logits / softcap) where softcap > 0. loss is
  // 0 on rows whose target is ignore_index and NaN on rows whose target is outside [0, V).
  m.def(
      "cross_entropy_forward(Tensor logits, Tensor target, int ignore_index, float "
      "label_smoothing, float softcap) -> (Tensor, Tensor)");
  // The same, also writing over the logits the gradient of sum(loss) * grad_scale (a one-element
  // tensor; None for 1) over the non-ignored rows, in the same pass.
  m.def(
      "cross_entropy_forward_backward_(Tensor(a!) logits, Tensor target, Tensor? grad_scale, int "
      "ignore_index, float label_smoothing, float softcap) -> (Tensor, Tensor)");
  // [count, 1 / count] of the targets [M] that are not ignore_index, in dtype (float32; float64
  // on the CPU): the mean's divisor and its gradient's scale, made on the device (no host sync).
  m.def("cross_entropy_count(Tensor target, int ignore_index, ScalarType dtype) -> Tensor");
  // The rows' losses [M] reduced to one: sum / count[0] (None: the sum), summed in float64 in a
  // fixed order, a 0-d tensor of dtype rounded once.
  m.def("reduce_loss(Tensor loss_rows, Tensor? count, ScalarType dtype) -> Tensor");
  // dlogits of sum(loss * dloss) from the forward's lse: a new tensor, or over the logits (_).
  m.def(
      "cross_entropy_backward(Tensor dloss, Tensor logits, Tensor target, Tensor lse, int "
      "ignore_index, float label_smoothing, float softcap) -> Tensor");
  m.def(
      "cross_entropy_backward_(Tensor dloss, Tensor(a!) logits, Tensor target, Tensor lse, int "
      "ignore_index, float label_smoothing, float softcap) -> ()");
  // grad *= scale (a one-element tensor, float32 or grad's dtype), in place: the forward's fused
  // gradient times the upstream gradient. Where scale is 1 the kernel returns at once (decided on
  // the device).
  m.def("scale_gradient_(Tensor(a!) grad, Tensor scale) -> ()");
  // The plan of a softmax or cross-entropy call on x, as one line (core/reduce_plan.h, describe).
  m.def("explain_rows(str op, Tensor x) -> str");
  // oink.linear_cross_entropy's chunking: (chunk_rows, chunks, description).
  m.def(
      "plan_linear_cross_entropy(int rows, int vocab, int hidden, int elem_bytes) -> (int, int, "
      "str)");
  // The launch plan a call would use, as named fields (core/plan.h, plan_facts): the names of
  // the text, number and list fields, then the texts, the numbers and the two lists (oink.explain
  // makes a Plan of them).
  m.def(
      "explain(str op, Tensor x, Tensor? weight=None, Tensor? residual=None, float eps=1e-6, "
      "Tensor? bias=None) -> (str[] names, str[] texts, int[] numbers, int[] row_sizes, "
      "int[] x_strides)");
  // Whether later launches may use programmatic dependent launch (default true; sm_90+ only).
  // Returns the previous setting. A process-wide choice, read when a call is planned.
  m.def("set_pdl(bool enabled) -> bool");
  // The nvcc targets this build embeds, e.g. "sm_80,sm_90a,...,compute_90" ("" without CUDA).
  m.def("cuda_targets() -> str");
  // Whether one of those targets runs on a GPU of this compute capability (no CUDA context).
  m.def("serves_capability(int major, int minor) -> bool");
}
