// oink::cross_entropy_count and oink::reduce_loss: the scalars around the cross-entropy row ops
// (oink.cross_entropy and oink.linear_cross_entropy's mean and sum), for CPU and CUDA tensors,
// each one launch on CUDA (kernels/launch_loss_scalars.h). Fake kernels: python/oink/_fake.py.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <optional>
#include <string>

#include "core/error.h"
#include "cpu/loss_scalars_cpu.h"
#include "torch/checks.h"
#include "torch/run.h"
#include "torch/tensors.h"

#ifdef OINK_WITH_CUDA
#include <torch/csrc/stable/accelerator.h>

#include "kernels/launch_loss_scalars.h"
#endif

namespace oink {
namespace {

using torch::headeronly::ScalarType;

// float32, or float64 on the CPU: the per-row values' dtype (`arg` names it in messages).
bool check_wide(const char* name, const char* arg, ScalarType dtype, const Tensor& on) {
  if (dtype == ScalarType::Double) {
    if (on.is_cuda()) {
      throw ArgError(name, arg, "must be float32 on CUDA (float64 runs on the CPU only)",
                     "float64");
    }
    return true;
  }
  if (dtype != ScalarType::Float) {
    throw ArgError(name, arg, "must be float32 or float64", torch::headeronly::toString(dtype));
  }
  return false;
}

int32_t aoti_dtype(DType d) {
  switch (d) {
    case DType::kFloat16:
      return aoti_torch_dtype_float16();
    case DType::kBFloat16:
      return aoti_torch_dtype_bfloat16();
    case DType::kFloat32:
      return aoti_torch_dtype_float32();
    case DType::kFloat64:
      return aoti_torch_dtype_float64();
  }
  return aoti_torch_dtype_float32();
}

// A 1-D contiguous tensor of at least `min_numel` elements (`what` says of what).
void check_vector(const char* name, const char* arg, const Tensor& t, int64_t min_numel,
                  const char* what) {
  if (!t.defined()) throw ArgError(name, arg, "must be a tensor", "None");
  if (t.dim() != 1 || t.size(0) < min_numel) {
    throw ArgError(name, arg, std::string("must be 1-D ") + what, "shape " + shape_of(t));
  }
  if (t.size(0) > 1 && t.stride(0) != 1) {
    throw ArgError(name, arg, "must be contiguous", "stride " + strides_of(t));
  }
}

// [count, 1 / count] of the rows whose target is not ignore_index, in `dtype` (float32, or
// float64 on the CPU) on target's device: the mean's divisor and its gradient's scale, made on
// the device (no host sync; CUDA graphs hold it). Exact count, each value rounded once.
Tensor cross_entropy_count(Tensor target, int64_t ignore_index, ScalarType dtype) {
  const char* name = "cross_entropy_count";
  require_kernels_for(name, target);
  check_vector(name, "target", target, 0, "[M] of class indices");
  if (target.scalar_type() != ScalarType::Long) {
    throw ArgError(name, "target", "must be int64 class indices", dtype_of(target));
  }
  const bool wide = check_wide(name, "dtype", dtype, target);
  const int64_t two = 2;
  const int64_t one = 1;
  Tensor out =
      empty_on(target, aoti_dtype(wide ? DType::kFloat64 : DType::kFloat32), 1, &two, &one);
  const auto* t = static_cast<const int64_t*>(target.data_ptr());
  const int64_t rows = target.size(0);
  if (!target.is_cuda()) {
    cpu::count_targets(t, rows, ignore_index, wide, out.data_ptr());
    return out;
  }
#ifdef OINK_WITH_CUDA
  const torch::stable::accelerator::DeviceGuard guard(target.get_device_index());
  check_launch(name,
               launch_count_targets(t, rows, ignore_index, static_cast<float*>(out.data_ptr()),
                                    current_stream_of(target)));
#endif
  return out;
}

// sum(loss_rows) / count[0] (count None: the sum) as a 0-d tensor of `dtype`, summed and divided
// in float64 in a fixed order, rounded once (through float32, as the row kernels round).
Tensor reduce_loss(Tensor loss_rows, std::optional<Tensor> count, ScalarType dtype) {
  const char* name = "reduce_loss";
  require_kernels_for(name, loss_rows);
  check_vector(name, "loss_rows", loss_rows, 0, "[M] of per-row losses");
  const bool wide = check_wide(name, "loss_rows", loss_rows.scalar_type(), loss_rows);
  if (count) {
    check_vector(name, "count", *count, 1, "[>= 1] (cross_entropy_count's)");
    if (!same_device(loss_rows, *count)) {
      throw ArgError(name, "count", "must be on loss_rows' device (" + device_of(loss_rows) + ")",
                     device_of(*count));
    }
    if (count->scalar_type() != loss_rows.scalar_type()) {
      throw ArgError(name, "count", "must have loss_rows' dtype (" + dtype_of(loss_rows) + ")",
                     dtype_of(*count));
    }
  }
  const std::optional<DType> out_dtype = to_dtype(dtype);
  if (!out_dtype) throw ArgError(name, "dtype", kFloatDtypes, torch::headeronly::toString(dtype));
  check_float64_on_cpu(name, "dtype", *out_dtype, loss_rows);
  Tensor out = empty_on(loss_rows, aoti_dtype(*out_dtype), 0, nullptr, nullptr);
  const void* c = count ? count->data_ptr() : nullptr;
  const int64_t rows = loss_rows.size(0);
  if (!loss_rows.is_cuda()) {
    cpu::reduce_loss(loss_rows.data_ptr(), rows, c, wide, out.data_ptr(), *out_dtype);
    return out;
  }
#ifdef OINK_WITH_CUDA
  const torch::stable::accelerator::DeviceGuard guard(loss_rows.get_device_index());
  check_launch(name, launch_reduce_loss(static_cast<const float*>(loss_rows.data_ptr()), rows,
                                        static_cast<const float*>(c), out.data_ptr(), *out_dtype,
                                        current_stream_of(loss_rows)));
#endif
  return out;
}

}  // namespace
}  // namespace oink

STABLE_TORCH_LIBRARY_IMPL(oink, CPU, m) {
  m.impl("cross_entropy_count", TORCH_BOX(&oink::cross_entropy_count));
  m.impl("reduce_loss", TORCH_BOX(&oink::reduce_loss));
}

// Registered in every build: one without CUDA kernels then says so (require_kernels_for).
STABLE_TORCH_LIBRARY_IMPL(oink, CUDA, m) {
  m.impl("cross_entropy_count", TORCH_BOX(&oink::cross_entropy_count));
  m.impl("reduce_loss", TORCH_BOX(&oink::reduce_loss));
}
