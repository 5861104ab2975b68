"""Fake (meta) kernels: what torch.compile and FakeTensor see. Written in Python because they
must handle symbolic shapes, which the C++ kernels cannot read.

They also run for real meta tensors: the dispatcher picks the Meta kernel when any argument is a
meta tensor, a CPU x with a meta weight included. So each one first checks that every tensor is
on x's device, as the C++ checks do (under FakeTensorMode every fake tensor reports the device it
stands for, so the check holds there too), and raises before returning anything.
"""

import torch

from oink._layout import rmsnorm_output


def _on_x_device(op, x, **others):
    """Raises ValueError, worded as the C++ checks word it (oink::ArgError), unless every tensor
    in `others` (None allowed) is on x's device."""
    for name, t in others.items():
        if t is not None and t.device != x.device:
            raise ValueError(
                f"oink.{op}: argument '{name}' must be on x's device ({x.device}), but got "
                f"{t.device}"
            )


@torch.library.register_fake("oink::rmsnorm")
def _rmsnorm_fake(x, weight, eps):
    _on_x_device("rmsnorm", x, weight=weight)
    # x's strides when its rows have one row stride, else dense: exactly the real kernels' output.
    return rmsnorm_output(x)


@torch.library.register_fake("oink::rmsnorm.out")
def _rmsnorm_out_fake(x, weight, eps, *, out):
    _on_x_device("rmsnorm.out", x, weight=weight, out=out)
    return out


@torch.library.register_fake("oink::fused_add_rms_norm")
def _fused_add_rms_norm_fake(x, residual, weight, eps):
    _on_x_device("fused_add_rms_norm", x, residual=residual, weight=weight)
    return None


# The names vLLM's built-in provider calls (csrc/torch/registration.cpp).
torch.library.register_fake("oink::rms_norm")(_rmsnorm_fake)
torch.library.register_fake("oink::fused_add_rms_norm_")(_fused_add_rms_norm_fake)


def _per_row(x):
    """rstd: one value per row of x, float32 (float64 for float64 x), contiguous."""
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    return x.new_empty(x.shape[:-1], dtype=dtype)


@torch.library.register_fake("oink::rmsnorm_forward")
def _rmsnorm_forward_fake(x, weight, eps):
    _on_x_device("rmsnorm_forward", x, weight=weight)
    return rmsnorm_output(x), _per_row(x)


@torch.library.register_fake("oink::rmsnorm_backward")
def _rmsnorm_backward_fake(dy, x, weight, rstd):
    _on_x_device("rmsnorm_backward", x, weight=weight, dy=dy, rstd=rstd)
    return rmsnorm_output(x), None if weight is None else torch.empty_like(weight)


@torch.library.register_fake("oink::layernorm")
def _layernorm_fake(x, weight, bias, eps):
    _on_x_device("layernorm", x, weight=weight, bias=bias)
    return rmsnorm_output(x)


@torch.library.register_fake("oink::layernorm_forward")
def _layernorm_forward_fake(x, weight, bias, eps):
    _on_x_device("layernorm_forward", x, weight=weight, bias=bias)
    return rmsnorm_output(x), _per_row(x), _per_row(x)


@torch.library.register_fake("oink::layernorm_backward")
def _layernorm_backward_fake(dy, x, weight, bias, mean, rstd):
    _on_x_device("layernorm_backward", x, weight=weight, bias=bias, dy=dy, mean=mean, rstd=rstd)
    return (
        rmsnorm_output(x),
        None if weight is None else torch.empty_like(weight),
        None if bias is None else torch.empty_like(bias),
    )


@torch.library.register_fake("oink::softmax")
def _softmax_fake(x):
    return rmsnorm_output(x)


@torch.library.register_fake("oink::softmax_backward")
def _softmax_backward_fake(dy, y):
    _on_x_device("softmax_backward", y, dy=dy)
    return rmsnorm_output(y)


@torch.library.register_fake("oink::cross_entropy_forward")
def _cross_entropy_forward_fake(logits, target, ignore_index, label_smoothing, softcap):
    _on_x_device("cross_entropy_forward", logits, target=target)
    return _per_row(logits), _per_row(logits)


@torch.library.register_fake("oink::cross_entropy_forward_backward_")
def _cross_entropy_forward_backward_fake(
    logits, target, grad_scale, ignore_index, label_smoothing, softcap
):
    _on_x_device("cross_entropy_forward_backward_", logits, target=target, grad_scale=grad_scale)
    return _per_row(logits), _per_row(logits)


@torch.library.register_fake("oink::cross_entropy_count")
def _cross_entropy_count_fake(target, ignore_index, dtype):
    return target.new_empty((2,), dtype=dtype)


@torch.library.register_fake("oink::reduce_loss")
def _reduce_loss_fake(loss_rows, count, dtype):
    _on_x_device("reduce_loss", loss_rows, count=count)
    return loss_rows.new_empty((), dtype=dtype)


@torch.library.register_fake("oink::cross_entropy_backward")
def _cross_entropy_backward_fake(
    dloss, logits, target, lse, ignore_index, label_smoothing, softcap
):
    _on_x_device("cross_entropy_backward", logits, dloss=dloss, target=target, lse=lse)
    return rmsnorm_output(logits)


@torch.library.register_fake("oink::cross_entropy_backward_")
def _cross_entropy_backward_inplace_fake(
    dloss, logits, target, lse, ignore_index, label_smoothing, softcap
):
    _on_x_device("cross_entropy_backward_", logits, dloss=dloss, target=target, lse=lse)
    return None


@torch.library.register_fake("oink::scale_gradient_")
def _scale_gradient_fake(grad, scale):
    _on_x_device("scale_gradient_", grad, scale=scale)
    return None
