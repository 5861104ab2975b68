// oink::softmax and oink::softmax_backward for CPU and CUDA tensors: check -> ReduceProblem ->
// plan -> run (torch/row_reduce_run.h). Fake kernels: python/oink/_fake.py.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include "core/error.h"
#include "torch/checks.h"
#include "torch/row_reduce_run.h"
#include "torch/tensors.h"

namespace oink {
namespace {

// y = softmax(x) over the last dimension: x's layout where x's rows have one row stride, else
// dense (as the norms' outputs, torch/tensors.h).
Tensor softmax(Tensor x) {
  RowView x_rows;
  ReduceProblem p = check_reduce_input(ReduceOp::kSoftmax, "x", x, &x_rows);
  Tensor y = output_for(x, x_rows);
  set_reduce_joint_rows(p, "y", x, y, p.out_strides);
  p.out_align = pointer_alignment(y.data_ptr());
  ReduceArgs args;
  args.in = x.data_ptr();
  args.out = y.data_ptr();
  run_reduce(p, args, x);
  return y;
}

// dx = y * (dy - sum(dy * y)): dy and y of one dtype, device and shape; dx in y's layout.
Tensor softmax_backward(Tensor dy, Tensor y) {
  const char* name = "softmax_backward";
  RowView y_rows;
  ReduceProblem p = check_reduce_input(ReduceOp::kSoftmaxBackward, "y", y, &y_rows);
  check_like(name, "dy", "y", y, dy);
  check_rows(name, "dy", dy);
  Tensor dx = output_for(y, y_rows);
  // Three tensors walked together: y (in2), dy (in) and dx (out).
  const auto sizes = y.sizes();
  const auto y_st = y.strides(), dy_st = dy.strides(), dx_st = dx.strides();
  const int64_t* strides[3] = {dy_st.data(), y_st.data(), dx_st.data()};
  RowStrides joint[3];
  std::string why;
  const auto dims = joint_rows(sizes.data(), static_cast<int>(y.dim()), strides, 3, joint, &why);
  if (!dims) {
    throw ArgError(name, "dy", "must be walkable together with y (" + why + ")",
                   "strides " + strides_of(dy) + " against y's " + strides_of(y));
  }
  p.row_dims = *dims;
  p.in_strides = joint[0];
  p.in2_strides = joint[1];
  p.out_strides = joint[2];
  p.in_align = pointer_alignment(dy.data_ptr());
  p.in2_align = pointer_alignment(y.data_ptr());
  p.out_align = pointer_alignment(dx.data_ptr());
  ReduceArgs args;
  args.in = dy.data_ptr();
  args.in2 = y.data_ptr();
  args.out = dx.data_ptr();
  run_reduce(p, args, y);
  return dx;
}

}  // namespace
}  // namespace oink

STABLE_TORCH_LIBRARY_IMPL(oink, CPU, m) {
  m.impl("softmax", TORCH_BOX(&oink::softmax));
  m.impl("softmax_backward", TORCH_BOX(&oink::softmax_backward));
}

// Registered in every build: one without CUDA kernels then says so (require_kernels_for).
STABLE_TORCH_LIBRARY_IMPL(oink, CUDA, m) {
  m.impl("softmax", TORCH_BOX(&oink::softmax));
  m.impl("softmax_backward", TORCH_BOX(&oink::softmax_backward));
}
