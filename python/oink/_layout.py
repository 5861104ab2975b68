"""Row layouts in Python, mirroring csrc/core/rows.cpp for the places that cannot call C++: the
fake kernels (symbolic shapes) and the vLLM provider's `supports_args` (called per dispatch).

A tensor is M rows of N = size(-1) contiguous elements; its leading dimensions, size-1 dimensions
dropped and each merged into the next inner one where it continues it, say where each row starts.
"""

from __future__ import annotations

import torch

MAX_ROW_DIMS = 4  # kMaxRowDims in csrc/core/rows.h


def leading_dims(t: torch.Tensor, batch_dim_as_large: bool = False) -> list[tuple[int, int]]:
    """(size, stride) of t's coalesced leading dimensions, innermost first. With
    `batch_dim_as_large`, a dimension 0 of size 0 or 1 counts as size 2, so that the answer holds
    for every batch size (the vLLM provider's checks)."""
    dims: list[tuple[int, int]] = []
    for d in range(t.dim() - 2, -1, -1):
        size, stride = t.size(d), t.stride(d)
        if batch_dim_as_large and d == 0:
            # Never dropped, and a symbolic size is never compared (no guard on the token count).
            if not isinstance(size, torch.SymInt):
                size = max(size, 2)
        elif size == 1:
            continue
        if dims and stride == dims[-1][1] * dims[-1][0]:
            dims[-1] = (dims[-1][0] * size, dims[-1][1])
        else:
            dims.append((size, stride))
    return dims


def one_row_stride(t: torch.Tensor) -> bool:
    """Whether t's rows have one row stride (contiguous or padded rows): rmsnorm then returns a
    tensor with t's strides, otherwise a contiguous one (docs/contract.md)."""
    return len(leading_dims(t)) <= 1


def rmsnorm_output(x: torch.Tensor) -> torch.Tensor:
    """An uninitialised tensor laid out as oink.rmsnorm's result for x (what the C++ op does)."""
    if one_row_stride(x):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def rows_ok(t: torch.Tensor) -> bool:
    """What oink accepts as rows: last dimension contiguous, rows that share no element (no
    broadcast), at most MAX_ROW_DIMS coalesced leading dimensions. Sizes of 0 or 1 are judged as
    if larger (the answer must hold for every batch size vLLM may pass)."""
    if t.dim() < 1 or (t.size(-1) > 1 and t.stride(-1) != 1):
        return False
    dims = leading_dims(t, batch_dim_as_large=True)
    extent = t.size(-1)
    for size, stride in sorted(dims, key=lambda sd: sd[1]):
        if stride < extent:
            return False
        extent += stride * (size - 1)
    return len(dims) <= MAX_ROW_DIMS
