// The CUDA path of the backward ops (torch/backward_cuda.h).
#ifdef OINK_WITH_CUDA
#include "torch/backward_cuda.h"

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/ops.h>

#include <string>

#include "core/backward_plan.h"
#include "core/error.h"
#include "kernels/launch.h"
#include "torch/checks.h"
#include "torch/run.h"
#include "torch/tensors.h"

namespace oink {
namespace {

// An empty batch: no kernel runs (so no row length is out of its reach), and the parameters'
// gradients are sums over no rows, zeros.
BackwardGrads empty_batch_grads(const Tensor& dx, const std::optional<Tensor>& weight_like,
                                const std::optional<Tensor>& bias) {
  auto zeros_like_param = [](const std::optional<Tensor>& param) -> std::optional<Tensor> {
    if (!param) return std::nullopt;
    Tensor zeros = empty_strided_like(*param, param->sizes().data(), param->strides().data());
    torch::stable::fill_(zeros, 0.0);
    return zeros;
  };
  return {dx, zeros_like_param(weight_like), zeros_like_param(bias)};
}

}  // namespace

BackwardGrads norm_backward_cuda(const char* op, Tensor dy, Tensor x, std::optional<Tensor> weight,
                                 const std::optional<Tensor>& weight_like,
                                 const std::optional<Tensor>& bias, const Tensor& rstd,
                                 const Tensor* mean, NormBackwardProblem bp,
                                 const RowView& x_rows) {
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const Tensor dx = output_for(x, x_rows);  // the layout the fake kernel promises (_fake.py)
  Tensor written = dx;                      // where the kernel writes dx
  set_backward_rows(op, bp, x, dy, dx);
  if (bp.rows.rows == 0) return empty_batch_grads(dx, weight_like, bias);
  bp.dy_align = pointer_alignment(dy.data_ptr());
  bp.dx_align = pointer_alignment(dx.data_ptr());
  if (backward_wants_dense_rows(bp)) {
    // Long unaligned rows: fresh copies (new allocations, so aligned even where a tensor was
    // already contiguous from an unaligned address), dense; dx is written in x's new layout,
    // then copied into dx's.
    x = torch::stable::clone(x);
    dy = torch::stable::clone(dy);
    written = torch::stable::empty_like(x);
    if (weight) {
      weight = torch::stable::clone(*weight);
      bp.rows.w_align = pointer_alignment(weight->data_ptr());
    }
    set_backward_rows(op, bp, x, dy, written);
    bp.rows.x_align = pointer_alignment(x.data_ptr());
    bp.dy_align = pointer_alignment(dy.data_ptr());
    bp.dx_align = pointer_alignment(written.data_ptr());
  }
  bp.clusters = backward_clusters_on(cuda_device_info(x.get_device_index()));
  if (const auto why = backward_unsupported(bp)) {
    throw ArgError(op, "x", "rows the CUDA backward kernel takes: " + *why, "shape " + shape_of(x));
  }
  const BackwardPlan plan = make_backward_plan(bp);
  std::optional<Tensor> dweight, dbias;
  // One scratch buffer: the partials, then (looped plan) the rows' sums.
  std::optional<Tensor> partials;
  const int64_t row_sums_bytes = backward_row_sums_total_bytes(plan, bp);
  const int64_t row_sums_offset = backward_row_sums_offset(plan, bp);
  if (const int64_t bytes =
          row_sums_bytes > 0 ? row_sums_offset + row_sums_bytes : backward_partials_bytes(plan, bp);
      bytes > 0) {
    const int64_t stride = 1;
    partials = empty_on(x, aoti_torch_dtype_uint8(), 1, &bytes, &stride);
  }
  const int64_t partial_set_bytes = plan.blocks * bp.rows.cols * plan.partial_bytes;
  BackwardArgs args;
  args.dy = dy.data_ptr();
  args.x = x.data_ptr();
  args.weight = weight ? weight->data_ptr() : nullptr;
  args.rstd = static_cast<const float*>(rstd.data_ptr());
  args.mean = mean != nullptr ? static_cast<const float*>(mean->data_ptr()) : nullptr;
  args.dx = written.data_ptr();
  auto* scratch = partials ? static_cast<char*>(partials->data_ptr()) : nullptr;
  if (row_sums_bytes > 0) args.row_sums = scratch + row_sums_offset;
  if (weight_like) {
    dweight = empty_strided_like(*weight_like, weight_like->sizes().data(),
                                 weight_like->strides().data());
    args.partials = scratch;
    args.dweight = dweight->data_ptr();
    args.dweight_dtype = float_dtype_of(*weight_like);
  }
  if (bias) {
    dbias = empty_strided_like(*bias, bias->sizes().data(), bias->strides().data());
    args.bias_partials = scratch + (weight_like ? partial_set_bytes : 0);
    args.dbias = dbias->data_ptr();
    args.dbias_dtype = float_dtype_of(*bias);
  }
  check_launch(op, launch_norm_backward(plan, bp, args, current_stream_of(x)));
  if (written.data_ptr() != dx.data_ptr()) {
    Tensor out = dx;
    torch::stable::copy_(out, written);  // on the current stream, after the kernels
  }
  return {dx, dweight, dbias};
}

}  // namespace oink
#endif
