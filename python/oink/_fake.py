"""Fake (meta) kernels: what torch.compile and FakeTensor see. Written in Python because they
must handle symbolic shapes, which the C++ kernels cannot read."""

import torch

from oink._layout import rmsnorm_output


@torch.library.register_fake("oink::rmsnorm")
def _rmsnorm_fake(x, weight, eps):
    # x's strides when its rows have one row stride, else dense: exactly the real kernels' output.
    return rmsnorm_output(x)


@torch.library.register_fake("oink::rmsnorm.out")
def _rmsnorm_out_fake(x, weight, eps, *, out):
    return out


@torch.library.register_fake("oink::fused_add_rms_norm")
def _fused_add_rms_norm_fake(x, residual, weight, eps):
    return None


def _per_row(x):
    """rstd: one value per row of x, float32 (float64 for float64 x), contiguous."""
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    return x.new_empty(x.shape[:-1], dtype=dtype)


@torch.library.register_fake("oink::rmsnorm_forward")
def _rmsnorm_forward_fake(x, weight, eps):
    return rmsnorm_output(x), _per_row(x)


@torch.library.register_fake("oink::rmsnorm_backward")
def _rmsnorm_backward_fake(dy, x, weight, rstd):
    return rmsnorm_output(x), None if weight is None else torch.empty_like(weight)


@torch.library.register_fake("oink::layernorm")
def _layernorm_fake(x, weight, bias, eps):
    return rmsnorm_output(x)


@torch.library.register_fake("oink::layernorm_forward")
def _layernorm_forward_fake(x, weight, bias, eps):
    return rmsnorm_output(x), _per_row(x), _per_row(x)


@torch.library.register_fake("oink::layernorm_backward")
def _layernorm_backward_fake(dy, x, weight, bias, mean, rstd):
    return (
        rmsnorm_output(x),
        None if weight is None else torch.empty_like(weight),
        None if bias is None else torch.empty_like(bias),
    )
