"""oink.softmax and oink.softmax_backward, and softmax's autograd formula (CPU and CUDA)."""

from __future__ import annotations

import torch

from oink._autograd import _dense


def softmax(x: torch.Tensor) -> torch.Tensor:
    """``softmax(x)`` over the last dimension: float32 math with the row's max subtracted,
    rounded once to x's dtype. x: float16/bfloat16/float32 (float64 on the CPU) with a contiguous
    last dimension and any leading strides (rows must not share memory). Returns x's shape, and
    x's strides when x's rows have one row stride (otherwise contiguous). Differentiable."""
    return torch.ops.oink.softmax.default(x)


def softmax_backward(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dx = y * (dy - sum(dy * y, -1)) for y = softmax(x): dy and y of one dtype, device and
    shape; dx in y's layout."""
    return torch.ops.oink.softmax_backward.default(dy, y)


def explain_rows(op: str, x: torch.Tensor) -> str:
    """The plan of a call of a reduce-then-map op ("softmax", "softmax_backward",
    "cross_entropy" or "cross_entropy_backward") on x (the input, dy or the logits), one line."""
    return torch.ops.oink.explain_rows.default(op, x)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _backward(ctx, dy):
    (y,) = ctx.saved_tensors
    return torch.ops.oink.softmax_backward.default(_dense(dy), y)


torch.library.register_autograd("oink::softmax", _backward, setup_context=_setup)
