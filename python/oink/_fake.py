"""Fake (meta) kernels: what torch.compile and FakeTensor see. Written in Python because they
must handle symbolic shapes, which the C++ kernels cannot read."""

import torch


@torch.library.register_fake("oink::rmsnorm")
def _rmsnorm_fake(x, weight, eps):
    # Same shape *and strides* as x, exactly like the real kernels (GUIDE §1).
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)


@torch.library.register_fake("oink::fused_add_rms_norm")
def _fused_add_rms_norm_fake(x, residual, weight, eps):
    return None
