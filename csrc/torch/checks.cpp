#include "torch/checks.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/error.h"

namespace oink {

using torch::headeronly::ScalarType;

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

std::string dtype_of(const Tensor& t) {
  return std::string(torch::headeronly::toString(t.scalar_type()));
}

std::optional<DType> to_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::Half:
      return DType::kFloat16;
    case ScalarType::BFloat16:
      return DType::kBFloat16;
    case ScalarType::Float:
      return DType::kFloat32;
    case ScalarType::Double:
      return DType::kFloat64;
    default:
      return std::nullopt;
  }
}

namespace {

constexpr int64_t kMaxRows = 0x7fffffff;

// Walks x and `other` together: the problem's row dimensions and both tensors' strides.
void set_joint_rows(NormProblem& p, const char* op, const char* arg, const Tensor& x,
                    const Tensor& other, RowStrides& other_strides) {
  const auto sizes = x.sizes();
  const auto x_strides = x.strides();
  const auto o_strides = other.strides();
  const int64_t* strides[2] = {x_strides.data(), o_strides.data()};
  RowStrides joint[2];
  std::string why;
  const auto dims = joint_rows(sizes.data(), static_cast<int>(x.dim()), strides, 2, joint, &why);
  if (!dims) {
    throw ArgError(op, arg, "and x must be walkable together (" + why + ")",
                   "strides " + strides_of(other) + " against x's " + strides_of(x));
  }
  p.row_dims = *dims;
  p.x_strides = joint[0];
  other_strides = joint[1];
}

}  // namespace

bool same_device(const Tensor& a, const Tensor& b) {
  return a.is_cpu() == b.is_cpu() && a.is_cuda() == b.is_cuda() &&
         (!a.is_cuda() || a.get_device_index() == b.get_device_index());
}

RowView check_rows(const char* op, const char* arg, const Tensor& t) {
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
  auto view = rows_of(sizes.data(), strides.data(), static_cast<int>(t.dim()), &why);
  if (!view)
    throw ArgError(op, arg, why, "shape " + shape_of(t) + " with strides " + strides_of(t));
  return *view;
}

const char* const kFloatDtypes = "must be float16, bfloat16 or float32 (or float64 on the CPU)";

// float64 is for the CPU path (gradcheck); no CUDA kernel is built for it.
void check_float64_on_cpu(const char* op, const char* arg, DType dtype, const Tensor& t) {
  if (dtype == DType::kFloat64 && t.is_cuda()) {
    throw ArgError(op, arg,
                   "must be float16, bfloat16 or float32 on CUDA (float64 runs on the CPU only)",
                   "float64 on " + device_of(t));
  }
}

void check_like(const char* op, const char* arg, const char* ref_name, const Tensor& ref,
                const Tensor& t) {
  const std::string ref_s = std::string(ref_name) + "'s";
  if (!t.defined()) throw ArgError(op, arg, "must be a tensor", "None");
  if (!same_device(ref, t)) {
    throw ArgError(op, arg, "must be on " + ref_s + " device (" + device_of(ref) + ")",
                   device_of(t));
  }
  if (t.scalar_type() != ref.scalar_type()) {
    const std::optional<DType> ref_dtype = to_dtype(ref.scalar_type());  // validated before
    throw ArgError(op, arg,
                   "must have " + ref_s + " dtype (" +
                       (ref_dtype ? dtype_name(*ref_dtype) : dtype_of(ref).c_str()) + ")",
                   dtype_of(t));
  }
  bool same_shape = t.dim() == ref.dim();
  for (int64_t d = 0; same_shape && d < ref.dim(); ++d) same_shape = t.size(d) == ref.size(d);
  if (!same_shape) {
    throw ArgError(op, arg, "must have " + ref_s + " shape " + shape_of(ref), shape_of(t));
  }
}

DType float_dtype_of(const Tensor& t) {
  const std::optional<DType> dtype = to_dtype(t.scalar_type());
  if (!dtype) throw std::logic_error("oink: float_dtype_of a tensor of " + dtype_of(t));
  return *dtype;
}

std::string shape_of(const Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

NormProblem check_norm_inputs(NormOp op, const Tensor& x, const std::optional<Tensor>& weight,
                              const Tensor* residual, double eps, RowView* x_rows,
                              const char* name) {
  if (name == nullptr) name = op_name(op);
  NormProblem p;
  p.op = op;

  if (!x.defined()) throw ArgError(name, "x", "must be a tensor", "None (an undefined tensor)");
  const std::optional<DType> x_dtype = to_dtype(x.scalar_type());
  if (!x_dtype) throw ArgError(name, "x", kFloatDtypes, dtype_of(x));
  check_float64_on_cpu(name, "x", *x_dtype, x);
  p.x_dtype = *x_dtype;
  const RowView rows = check_rows(name, "x", x);
  if (rows.rows > kMaxRows) {
    throw ArgError(name, "x", "must have at most 2^31 - 1 rows (one CUDA grid)",
                   std::to_string(rows.rows) + " rows");
  }
  p.rows = rows.rows;
  p.cols = rows.cols;
  p.row_dims = rows.dims;
  p.x_strides = p.out_strides = rows.strides;
  p.x_align = pointer_alignment(x.data_ptr());
  if (x_rows != nullptr) *x_rows = rows;

  if (residual != nullptr) {
    const Tensor& r = *residual;
    check_like(name, "residual", "x", x, r);
    const RowView res_rows = check_rows(name, "residual", r);
    const auto x_addr = reinterpret_cast<uintptr_t>(x.data_ptr());
    const auto r_addr = reinterpret_cast<uintptr_t>(r.data_ptr());
    if (rows_may_overlap(x_addr, rows, r_addr, res_rows, dtype_size(p.x_dtype))) {
      throw ArgError(name, "residual", "must not share memory with x (both are written)",
                     "overlapping storage");
    }
    set_joint_rows(p, name, "residual", x, r, p.residual_strides);
    p.out_strides = p.x_strides;  // the fused op writes x (NormProblem::written_strides)
    p.residual_align = pointer_alignment(r.data_ptr());
  }

  p.has_weight = weight.has_value();
  if (p.has_weight) {
    const Tensor& w = *weight;
    if (!w.defined()) throw ArgError(name, "weight", "must be a tensor", "None");
    if (!same_device(x, w)) {
      throw ArgError(name, "weight", "must be on x's device (" + device_of(x) + ")", device_of(w));
    }
    const std::optional<DType> w_dtype = to_dtype(w.scalar_type());
    if (!w_dtype) throw ArgError(name, "weight", kFloatDtypes, dtype_of(w));
    check_float64_on_cpu(name, "weight", *w_dtype, w);
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
    // The fused op writes x and the residual: the weight it reads must be neither. Byte ranges,
    // with the weight counted in x's elements (its own may be wider or narrower).
    if (residual != nullptr && p.cols > 0 && p.rows > 0) {
      RowView w_rows;
      w_rows.rows = 1;
      w_rows.cols =
          (p.cols * dtype_size(p.w_dtype) + dtype_size(p.x_dtype) - 1) / dtype_size(p.x_dtype);
      w_rows.strides.s[0] = w_rows.cols;
      const auto w_addr = reinterpret_cast<uintptr_t>(w.data_ptr());
      const std::pair<const Tensor*, const char*> written[] = {{&x, "x"}, {residual, "residual"}};
      for (const auto& [t, arg] : written) {
        if (rows_may_overlap(reinterpret_cast<uintptr_t>(t->data_ptr()), check_rows(name, arg, *t),
                             w_addr, w_rows, dtype_size(p.x_dtype))) {
          throw ArgError(
              name, "weight",
              std::string("must not share memory with ") + arg + " (which the op writes)",
              "overlapping storage");
        }
      }
    }
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

NormBackwardProblem check_norm_backward_inputs(const char* name, NormOp op, const Tensor& dy,
                                               const Tensor& x, const std::optional<Tensor>& weight,
                                               RowView* x_rows) {
  NormBackwardProblem bp;
  bp.rows = check_norm_inputs(op, x, weight, nullptr, 0.0, x_rows, name);
  check_like(name, "dy", "x", x, dy);
  check_rows(name, "dy", dy);
  return bp;
}

void check_per_row(const char* op, const char* arg, const Tensor& x, DType x_dtype,
                   const Tensor& stat) {
  if (!stat.defined()) throw ArgError(op, arg, "must be a tensor", "None");
  if (!same_device(x, stat)) {
    throw ArgError(op, arg, "must be on x's device (" + device_of(x) + ")", device_of(stat));
  }
  const bool wide = x_dtype == DType::kFloat64;
  const ScalarType want = wide ? ScalarType::Double : ScalarType::Float;
  bool rows_match = stat.dim() == x.dim() - 1;
  for (int64_t d = 0; rows_match && d + 1 < x.dim(); ++d) rows_match = stat.size(d) == x.size(d);
  if (stat.scalar_type() != want || !rows_match || !stat.is_contiguous()) {
    throw ArgError(op, arg,
                   std::string("must be the forward op's: a contiguous ") +
                       (wide ? "float64" : "float32") + " tensor of shape x.shape[:-1] on " +
                       device_of(x),
                   dtype_of(stat) + " of shape " + shape_of(stat) + " on " + device_of(stat) +
                       (stat.is_contiguous() ? "" : ", not contiguous"));
  }
}

std::optional<DType> check_bias(const char* op, const Tensor& x, const std::optional<Tensor>& bias,
                                int64_t cols) {
  if (!bias) return std::nullopt;
  const Tensor& b = *bias;
  if (!b.defined()) throw ArgError(op, "bias", "must be a tensor", "None");
  if (!same_device(x, b)) {
    throw ArgError(op, "bias", "must be on x's device (" + device_of(x) + ")", device_of(b));
  }
  const std::optional<DType> dtype = to_dtype(b.scalar_type());
  if (!dtype) throw ArgError(op, "bias", kFloatDtypes, dtype_of(b));
  check_float64_on_cpu(op, "bias", *dtype, b);
  if (b.dim() != 1 || b.size(0) != cols) {
    throw ArgError(op, "bias", "must be 1-D of length N=" + std::to_string(cols) + " (x.size(-1))",
                   "shape " + shape_of(b));
  }
  if (b.size(0) > 1 && b.stride(0) != 1) {
    throw ArgError(op, "bias", "must be contiguous", "stride " + std::to_string(b.stride(0)));
  }
  return dtype;
}

void set_backward_rows(const char* name, NormBackwardProblem& bp, const Tensor& x, const Tensor& dy,
                       const Tensor& dx) {
  const auto sizes = x.sizes();
  const auto xs = x.strides(), ds = dy.strides(), os = dx.strides();
  const int64_t* strides[3] = {xs.data(), ds.data(), os.data()};
  RowStrides joint[3];
  std::string why;
  const auto dims = joint_rows(sizes.data(), static_cast<int>(x.dim()), strides, 3, joint, &why);
  if (!dims) {
    throw ArgError(name, "dy", "and x must be walkable together (" + why + ")",
                   "strides " + strides_of(dy) + " against x's " + strides_of(x));
  }
  bp.rows.row_dims = *dims;
  bp.rows.x_strides = bp.rows.out_strides = joint[0];
  bp.dy_strides = joint[1];
  bp.dx_strides = joint[2];
}

void check_out(NormProblem& p, const char* op, const Tensor& x, const RowView& x_rows,
               const Tensor& out) {
  check_like(op, "out", "x", x, out);
  const RowView out_rows = check_rows(op, "out", out);
  if (rows_may_overlap(reinterpret_cast<uintptr_t>(x.data_ptr()), x_rows,
                       reinterpret_cast<uintptr_t>(out.data_ptr()), out_rows,
                       dtype_size(p.x_dtype))) {
    throw ArgError(op, "out", "must not share memory with x", "overlapping storage");
  }
  set_joint_rows(p, op, "out", x, out, p.out_strides);
  p.out_align = pointer_alignment(out.data_ptr());
}

}  // namespace oink
