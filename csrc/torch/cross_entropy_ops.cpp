// oink::cross_entropy_forward, its fused form that also writes the gradient over the logits,
// oink::cross_entropy_backward (out of place and in place) and oink::scale_gradient_, for CPU
// and CUDA tensors: check ->
// ReduceProblem -> plan -> run (torch/row_reduce_run.h). The reductions over rows (mean, sum)
// are the Python layer's (python/oink/losses.py); fake kernels: python/oink/_fake.py.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>

#include "core/error.h"
#include "torch/checks.h"
#include "torch/row_reduce_run.h"
#include "torch/tensors.h"

namespace oink {
namespace {

using torch::headeronly::ScalarType;

std::string number(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", v);
  return s;
}

bool bytes_overlap(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const auto begin = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); };
  const auto end = [&](const Tensor& t) {
    int64_t last = 0;  // offset of the last element (strides >= 0 for the checked tensors)
    for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
    return begin(t) + static_cast<uintptr_t>((last + 1) * t.element_size());
  };
  return begin(a) < end(b) && begin(b) < end(a);
}

// logits [M, V] (V >= 1, last dimension contiguous, any row stride), target [M] int64
// contiguous on logits' device, the options; the problem with logits as `in` and `out`.
ReduceProblem check_ce_inputs(ReduceOp op, const Tensor& logits, const Tensor& target,
                              double label_smoothing, double softcap) {
  const char* name = traits_of(op).name;
  if (logits.defined() && logits.dim() != 2) {
    throw ArgError(name, "logits", "must be 2-D [M, V]", "shape " + shape_of(logits));
  }
  ReduceProblem p = check_reduce_input(op, "logits", logits, nullptr);
  if (p.cols < 1) throw ArgError(name, "logits", "must have V >= 1 classes", shape_of(logits));
  if (!target.defined()) throw ArgError(name, "target", "must be a tensor", "None");
  if (!same_device(logits, target)) {
    throw ArgError(name, "target", "must be on logits' device (" + device_of(logits) + ")",
                   device_of(target));
  }
  if (target.scalar_type() != ScalarType::Long) {
    throw ArgError(name, "target", "must be int64 class indices", dtype_of(target));
  }
  if (target.dim() != 1 || target.size(0) != p.rows) {
    throw ArgError(name, "target", "must be 1-D of length M=" + std::to_string(p.rows),
                   "shape " + shape_of(target));
  }
  if (target.size(0) > 1 && target.stride(0) != 1) {
    throw ArgError(name, "target", "must be contiguous", "stride " + strides_of(target));
  }
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0)) {
    throw ArgError(name, "label_smoothing", "must be in [0, 1]", number(label_smoothing));
  }
  if (!(softcap >= 0.0) || !std::isfinite(softcap)) {
    throw ArgError(name, "softcap", "must be a finite number > 0 (or None)", number(softcap));
  }
  p.label_smoothing = label_smoothing > 0.0;
  p.softcap = softcap > 0.0;
  return p;
}

// A per-row value (lse, dloss) or a scalar (grad_scale, scale): float32 (float64 for float64
// rows), contiguous, on the device of `rows` (the logits, or the gradient: `rows_arg`), `numel`
// elements, not sharing memory with the rows. `or_rows_dtype`: the rows' own dtype is taken too.
void check_values(const char* name, const char* arg, const char* rows_arg, const Tensor& rows,
                  DType dtype, const Tensor& t, int64_t numel, bool one_dim,
                  bool or_rows_dtype = false) {
  const std::string of = rows_arg;
  if (!t.defined()) throw ArgError(name, arg, "must be a tensor", "None");
  if (!same_device(rows, t)) {
    throw ArgError(name, arg, "must be on the device of " + of + " (" + device_of(rows) + ")",
                   device_of(t));
  }
  const bool f64 = dtype == DType::kFloat64;
  const bool own = or_rows_dtype && t.scalar_type() == rows.scalar_type();
  if (!own && t.scalar_type() != (f64 ? ScalarType::Double : ScalarType::Float)) {
    throw ArgError(name, arg,
                   f64 ? "must be float64 (as " + of + ")"
                   : or_rows_dtype
                       ? "must be float32 or " + of + "'s dtype (" + dtype_of(rows) + ")"
                       : std::string("must be float32"),
                   dtype_of(t));
  }
  if (one_dim ? (t.dim() != 1 || t.size(0) != numel) : t.numel() != numel) {
    throw ArgError(name, arg,
                   one_dim ? "must be 1-D of length M=" + std::to_string(numel)
                           : std::string("must hold one value"),
                   "shape " + shape_of(t));
  }
  if (t.dim() == 1 && t.size(0) > 1 && t.stride(0) != 1) {
    throw ArgError(name, arg, "must be contiguous", "stride " + strides_of(t));
  }
  if (bytes_overlap(t, rows)) {
    throw ArgError(name, arg, "must not share memory with " + of, "overlapping storage");
  }
}

ReduceArgs ce_args(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                   double label_smoothing, double softcap) {
  ReduceArgs a;
  a.in = logits.data_ptr();
  a.out = logits.data_ptr();
  a.target = static_cast<const int64_t*>(target.data_ptr());
  a.ignore_index = ignore_index;
  a.label_smoothing = static_cast<float>(label_smoothing);
  a.softcap = static_cast<float>(softcap);
  return a;
}

std::tuple<Tensor, Tensor> run_forward_ce(ReduceProblem p, ReduceArgs a, const Tensor& logits) {
  Tensor loss = per_row_for(logits, p.dtype);
  Tensor lse = per_row_for(logits, p.dtype);
  a.loss = loss.data_ptr();
  a.lse = lse.data_ptr();
  run_reduce(p, a, logits);
  return {loss, lse};
}

// Per row: the loss (0 where target == ignore_index, NaN where the target is out of range) and
// the log-sum-exp of the (capped) logits. Reads the logits once.
std::tuple<Tensor, Tensor> cross_entropy_forward(Tensor logits, Tensor target, int64_t ignore_index,
                                                 double label_smoothing, double softcap) {
  ReduceProblem p =
      check_ce_inputs(ReduceOp::kCrossEntropy, logits, target, label_smoothing, softcap);
  p.writes_rows = false;
  return run_forward_ce(p, ce_args(logits, target, ignore_index, label_smoothing, softcap), logits);
}

// The same, and the gradient of sum(loss * grad_scale over the non-ignored rows) written over
// the logits in the same pass: one read and one write of the logits for the loss and its
// gradient (oink.linear_cross_entropy's chunks). grad_scale: its first element is the scale
// (cross_entropy_count's [count, 1 / count] passes 1 / count as its second: a view); None for 1.
std::tuple<Tensor, Tensor> cross_entropy_forward_backward_(Tensor logits, Tensor target,
                                                           std::optional<Tensor> grad_scale,
                                                           int64_t ignore_index,
                                                           double label_smoothing, double softcap) {
  const char* name = "cross_entropy_forward_backward_";
  ReduceProblem p =
      check_ce_inputs(ReduceOp::kCrossEntropy, logits, target, label_smoothing, softcap);
  if (grad_scale)
    check_values(name, "grad_scale", "logits", logits, p.dtype, *grad_scale, 1, false);
  p.writes_rows = true;
  p.out_align = p.in_align;
  ReduceArgs a = ce_args(logits, target, ignore_index, label_smoothing, softcap);
  if (grad_scale) a.grad_scale = grad_scale->data_ptr();
  return run_forward_ce(p, a, logits);
}

void run_backward_ce(const char* name, const Tensor& dloss, const Tensor& logits,
                     const Tensor& target, const Tensor& lse, int64_t ignore_index,
                     double label_smoothing, double softcap, const Tensor& dlogits,
                     ReduceProblem p) {
  check_values(name, "dloss", "logits", logits, p.dtype, dloss, p.rows, true);
  check_values(name, "lse", "logits", logits, p.dtype, lse, p.rows, true);
  ReduceArgs a = ce_args(logits, target, ignore_index, label_smoothing, softcap);
  a.out = dlogits.data_ptr();
  a.dloss = dloss.data_ptr();
  a.lse = const_cast<void*>(static_cast<const void*>(lse.data_ptr()));
  p.out_strides = RowStrides{{dlogits.stride(0)}};
  p.out_align = pointer_alignment(dlogits.data_ptr());
  run_reduce(p, a, logits);
}

// dlogits of sum(loss * dloss) from the forward's lse: a new tensor in logits' layout.
Tensor cross_entropy_backward(Tensor dloss, Tensor logits, Tensor target, Tensor lse,
                              int64_t ignore_index, double label_smoothing, double softcap) {
  const ReduceProblem p =
      check_ce_inputs(ReduceOp::kCrossEntropyBackward, logits, target, label_smoothing, softcap);
  RowView rows;
  check_reduce_input(ReduceOp::kCrossEntropyBackward, "logits", logits, &rows);
  Tensor dlogits = output_for(logits, rows);
  run_backward_ce("cross_entropy_backward", dloss, logits, target, lse, ignore_index,
                  label_smoothing, softcap, dlogits, p);
  return dlogits;
}

// The same written over the logits (the in-place gradient: no [M, V] allocation).
void cross_entropy_backward_(Tensor dloss, Tensor logits, Tensor target, Tensor lse,
                             int64_t ignore_index, double label_smoothing, double softcap) {
  const ReduceProblem p =
      check_ce_inputs(ReduceOp::kCrossEntropyBackward, logits, target, label_smoothing, softcap);
  run_backward_ce("cross_entropy_backward_", dloss, logits, target, lse, ignore_index,
                  label_smoothing, softcap, logits, p);
}

// grad *= scale in place (the fused gradient of cross_entropy_forward_backward_ times the
// upstream gradient): any layout whose rows have a contiguous last dimension. scale: one value,
// float32 (float64 for float64 grad) or grad's own dtype (autograd's seed of a bfloat16 loss,
// taken as it is: no cast launched). Where scale == 1, nothing is read or written (the CUDA
// kernel returns at once: no host sync decides it).
void scale_gradient_(Tensor grad, Tensor scale) {
  RowView rows;
  ReduceProblem p = check_reduce_input(ReduceOp::kScaleGradient, "grad", grad, &rows);
  check_values("scale_gradient_", "scale", "grad", grad, p.dtype, scale, 1, false,
               /*or_rows_dtype=*/true);
  p.out_align = p.in_align;
  ReduceArgs a;
  a.in = grad.data_ptr();
  a.out = grad.data_ptr();
  a.grad_scale = scale.data_ptr();
  a.grad_scale_in_rows_dtype = p.dtype != DType::kFloat32 && p.dtype != DType::kFloat64 &&
                               scale.scalar_type() == grad.scalar_type();
  run_reduce(p, a, grad);
}

}  // namespace
}  // namespace oink

STABLE_TORCH_LIBRARY_IMPL(oink, CPU, m) {
  m.impl("cross_entropy_forward", TORCH_BOX(&oink::cross_entropy_forward));
  m.impl("cross_entropy_forward_backward_", TORCH_BOX(&oink::cross_entropy_forward_backward_));
  m.impl("cross_entropy_backward", TORCH_BOX(&oink::cross_entropy_backward));
  m.impl("cross_entropy_backward_", TORCH_BOX(&oink::cross_entropy_backward_));
  m.impl("scale_gradient_", TORCH_BOX(&oink::scale_gradient_));
}

// Registered in every build: one without CUDA kernels then says so (require_kernels_for).
STABLE_TORCH_LIBRARY_IMPL(oink, CUDA, m) {
  m.impl("cross_entropy_forward", TORCH_BOX(&oink::cross_entropy_forward));
  m.impl("cross_entropy_forward_backward_", TORCH_BOX(&oink::cross_entropy_forward_backward_));
  m.impl("cross_entropy_backward", TORCH_BOX(&oink::cross_entropy_backward));
  m.impl("cross_entropy_backward_", TORCH_BOX(&oink::cross_entropy_backward_));
  m.impl("scale_gradient_", TORCH_BOX(&oink::scale_gradient_));
}
