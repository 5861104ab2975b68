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
