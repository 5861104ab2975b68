#include "torch/checks.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"

namespace oink {
namespace {

using torch::headeronly::ScalarType;

constexpr int64_t kMaxRows = 0x7fffffff;

std::string shape_of(const Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

std::string strides_of(const Tensor& t) {
  std::string s = "(";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.stride(d));
  return s + ")";
}

std::string device_of(const Tensor& t) {
  if (t.is_cpu()) return "cpu";
  if (t.is_cuda()) return "cuda:" + std::to_string(t.get_device_index());
  return "a device other than cpu/cuda";
}

std::optional<DType> to_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::Half:
      return DType::kFloat16;
    case ScalarType::BFloat16:
      return DType::kBFloat16;
    case ScalarType::Float:
      return DType::kFloat32;
    default:
      return std::nullopt;
  }
}

bool same_device(const Tensor& a, const Tensor& b) {
  return a.is_cpu() == b.is_cpu() && a.is_cuda() == b.is_cuda() &&
         (!a.is_cuda() || a.get_device_index() == b.get_device_index());
}

RowLayout check_rows(const char* op, const char* arg, const Tensor& t) {
  if (!t.defined()) throw ArgError(op, arg, "must be a tensor", "None (an undefined tensor)");
  if (t.dim() < 1) throw ArgError(op, arg, "must have rank >= 1", "a 0-d tensor");
  if (!t.is_cpu() && !t.is_cuda()) {
    throw ArgError(op, arg, "must be on a CPU or CUDA device", device_of(t));
  }
  if (t.size(-1) > 1 && t.stride(-1) != 1) {
    throw ArgError(op, arg, "must have stride 1 in its last dimension",
                   "strides " + strides_of(t) + " for shape " + shape_of(t));
  }
  std::string why;
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  auto layout = rows_of(sizes.data(), strides.data(), static_cast<int>(t.dim()), &why);
  if (!layout) {
    throw ArgError(op, arg, "must be viewable as rows with one row stride (" + why + ")",
                   "shape " + shape_of(t) + " with strides " + strides_of(t));
  }
  return *layout;
}

}  // namespace

NormProblem check_norm_inputs(NormOp op, const Tensor& x, const std::optional<Tensor>& weight,
                              const Tensor* residual, double eps) {
  const char* name = op_name(op);
  NormProblem p;
  p.op = op;

  if (!x.defined()) throw ArgError(name, "x", "must be a tensor", "None (an undefined tensor)");
  const std::optional<DType> x_dtype = to_dtype(x.scalar_type());
  if (!x_dtype) {
    throw ArgError(name, "x", "must be float16, bfloat16 or float32",
                   std::string(torch::headeronly::toString(x.scalar_type())));
  }
  p.x_dtype = *x_dtype;
  const RowLayout rows = check_rows(name, "x", x);
  if (rows.rows > kMaxRows) {
    throw ArgError(name, "x", "must have at most 2^31 - 1 rows (one CUDA grid)",
                   std::to_string(rows.rows) + " rows");
  }
  p.rows = rows.rows;
  p.cols = rows.cols;
  p.ld_x = rows.ld;
  p.ld_out = rows.ld;
  p.x_align = pointer_alignment(x.data_ptr());

  if (residual != nullptr) {
    const Tensor& r = *residual;
    if (!r.defined()) throw ArgError(name, "residual", "must be a tensor", "None");
    if (!same_device(x, r)) {
      throw ArgError(name, "residual", "must be on x's device (" + device_of(x) + ")",
                     device_of(r));
    }
    if (r.scalar_type() != x.scalar_type()) {
      throw ArgError(name, "residual",
                     std::string("must have x's dtype (") + dtype_name(p.x_dtype) + ")",
                     std::string(torch::headeronly::toString(r.scalar_type())));
    }
    bool same_shape = r.dim() == x.dim();
    for (int64_t d = 0; same_shape && d < x.dim(); ++d) same_shape = r.size(d) == x.size(d);
    if (!same_shape) {
      throw ArgError(name, "residual", "must have x's shape " + shape_of(x),
                     "shape " + shape_of(r));
    }
    const RowLayout res_rows = check_rows(name, "residual", r);
    p.ld_residual = res_rows.ld;
    p.residual_align = pointer_alignment(r.data_ptr());
    const auto x_addr = reinterpret_cast<uintptr_t>(x.data_ptr());
    const auto r_addr = reinterpret_cast<uintptr_t>(r.data_ptr());
    if (rows_may_overlap(x_addr, rows, r_addr, res_rows, dtype_size(p.x_dtype))) {
      throw ArgError(name, "residual", "must not share memory with x (both are written)",
                     "overlapping storage");
    }
  }

  p.has_weight = weight.has_value();
  if (p.has_weight) {
    const Tensor& w = *weight;
    if (!w.defined()) throw ArgError(name, "weight", "must be a tensor", "None");
    if (!same_device(x, w)) {
      throw ArgError(name, "weight", "must be on x's device (" + device_of(x) + ")", device_of(w));
    }
    const std::optional<DType> w_dtype = to_dtype(w.scalar_type());
    if (!w_dtype || (*w_dtype != p.x_dtype && *w_dtype != DType::kFloat32)) {
      throw ArgError(name, "weight",
                     std::string("must have x's dtype (") + dtype_name(p.x_dtype) + ") or float32",
                     std::string(torch::headeronly::toString(w.scalar_type())));
    }
    p.w_dtype = *w_dtype;
    if (w.dim() != 1 || w.size(0) != p.cols) {
      throw ArgError(name, "weight",
                     "must be 1-D of length N=" + std::to_string(p.cols) + " (x.size(-1))",
                     "shape " + shape_of(w));
    }
    if (w.size(0) > 1 && w.stride(0) != 1) {
      throw ArgError(name, "weight", "must be contiguous", "stride " + std::to_string(w.stride(0)));
    }
    p.w_align = pointer_alignment(w.data_ptr());
  } else {
    p.w_dtype = p.x_dtype;
  }

  if (!(eps >= 0.0) || !std::isfinite(eps)) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", eps);
    throw ArgError(name, "eps", "must be a finite number >= 0", got);
  }
  return p;
}

}  // namespace oink
