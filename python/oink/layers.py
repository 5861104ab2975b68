"""Layers for the Hugging Face kernels hub (`kernels` package, transformers' kernel mapping).

``RMSNorm`` follows the hub's layer contract: an ``nn.Module`` with no constructor and no members
of its own besides ``forward`` (and the ``can_torch_compile`` / ``has_backward`` flags), whose
forward replaces the forward of a transformers class decorated with
``@use_kernel_forward_from_hub("RMSNorm")`` (LlamaRMSNorm, MistralRMSNorm, Qwen2RMSNorm,
Qwen3RMSNorm, DeepseekV3RMSNorm, ...). It reads that module's ``weight`` and
``variance_epsilon``. A kernel repository exposes it from its ``layers`` module::

    # <repo>/layers.py (or <repo>/build/<variant>/<name>/layers.py)
    from oink.layers import RMSNorm  # noqa: F401

Numerics: oink normalizes in float32 and rounds once to the output dtype. transformers'
LlamaRMSNorm rounds the normalized row to the input dtype first and multiplies by the weight
afterwards (a second rounding); for 16-bit activations the two differ by about one unit in the
last place of the output dtype. The output dtype is the one LlamaRMSNorm returns: the promotion
of the input's and the weight's dtypes (a float32 weight with bfloat16 activations gives a
float32 result, as transformers does).
"""

from __future__ import annotations

import torch
from torch import nn

from oink.ops import rmsnorm

__all__ = ["RMSNorm"]


class RMSNorm(nn.Module):
    """oink's RMSNorm as a kernels-hub layer (see the module docstring). It has no parameters of
    its own: kernelize() swaps the forward of a module that holds ``weight`` and
    ``variance_epsilon``."""

    can_torch_compile = True
    has_backward = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        dtype = torch.promote_types(hidden_states.dtype, weight.dtype)
        x = hidden_states.to(dtype)
        if x.dim() > 0 and x.stride(-1) != 1:
            x = x.contiguous()
        return rmsnorm(x, weight, self.variance_epsilon)
