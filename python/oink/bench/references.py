"""Float64 references of every benchmarked pass and the correctness gate that runs before any
timing. References are computed a block of rows at a time so that the largest batches (512K
rows) never need their whole float64 copy."""

from __future__ import annotations

import torch

EPS = 1e-6
BLOCK_ROWS = 8192


def unit_roundoff(dtype: torch.dtype) -> float:
    return {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}[dtype]


def rel_l2_bound(dtype: torch.dtype) -> float:
    """The gate: 4 units of roundoff for 16-bit outputs; float32 at 1e-5 (reduction order)."""
    return 1e-5 if dtype == torch.float32 else 4 * unit_roundoff(dtype)


def _rms64(x, w):
    rstd = torch.rsqrt(x.pow(2).mean(-1) + EPS)
    return x * rstd.unsqueeze(-1) * w, rstd


def _ln_stats64(x):
    return x.mean(-1), torch.rsqrt(x.var(-1, unbiased=False) + EPS)


def _block(case: str, t: list[torch.Tensor]) -> tuple:
    """The case's outputs in float64 for one block of rows (inputs first, parameters last)."""
    if case == "rmsnorm":
        return (_rms64(t[0], t[1])[0],)
    if case == "fused_add_rms_norm":
        x, residual, w = t
        new_residual = x + residual
        return _rms64(new_residual, w)[0], new_residual
    if case == "rmsnorm forward":
        return _rms64(t[0], t[1])
    if case == "rmsnorm backward":
        dy, x, _, w = t
        r = _rms64(x, w)[1].unsqueeze(-1)
        g = dy * w
        c = (g * x).sum(-1, keepdim=True) * r.pow(3) / x.shape[-1]
        return r * g - c * x, (dy * x * r).sum(0)
    if case == "layernorm forward":
        x, w, b = t
        mean, rstd = _ln_stats64(x)
        return (x - mean.unsqueeze(-1)) * rstd.unsqueeze(-1) * w + b, mean, rstd
    dy, x, _, _, w, _ = t
    mean, rstd = _ln_stats64(x)
    xhat = (x - mean.unsqueeze(-1)) * rstd.unsqueeze(-1)
    g = dy * w
    dx = rstd.unsqueeze(-1) * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, True))
    return dx, (dy * xhat).sum(0), dy.sum(0)


# Outputs that are sums over the rows (the parameters' gradients), by case.
COLUMN_SUMS = {"rmsnorm backward": {1}, "layernorm backward": {1, 2}}


def reference(case: str, inputs: list[torch.Tensor], params: list[torch.Tensor]) -> tuple:
    """The case's outputs in float64 (on the inputs' device), from the exact statistics."""
    m = inputs[0].shape[0]
    sums = COLUMN_SUMS.get(case, set())
    outs: list = []
    for start in range(0, max(m, 1), BLOCK_ROWS):
        rows = [t[start : start + BLOCK_ROWS].double() for t in inputs]
        block = _block(case, rows + [p.double() for p in params])
        if not outs:
            outs = [o if i in sums else o.new_empty((m, *o.shape[1:])) for i, o in enumerate(block)]
        for i, o in enumerate(block):
            if i not in sums:
                outs[i][start : start + o.shape[0]] = o
            elif start > 0:
                outs[i] += o
    return tuple(outs)


def rel_l2(y: torch.Tensor, ref: torch.Tensor) -> float:
    """||y - ref|| / ||ref|| in float64 over both flattened; inf if the sizes differ or y has a
    non-finite value."""
    y, ref = y.detach().reshape(-1).to(ref.device), ref.reshape(-1)
    if y.numel() != ref.numel() or not bool(torch.isfinite(y).all()):
        return float("inf")
    diff2 = ref2 = 0.0
    step = 1 << 26
    for s in range(0, y.numel(), step):
        diff2 += (y[s : s + step].double() - ref[s : s + step]).square().sum().item()
        ref2 += ref[s : s + step].square().sum().item()
    return diff2**0.5 / (ref2**0.5 if ref2 > 0 else 1.0)


def gate(outputs: tuple, ref: tuple) -> tuple[float, str | None]:
    """(worst rel_l2 over the outputs a provider returned, None if all pass or why not). A
    provider may return fewer outputs than the reference (an inference kernel: y only)."""
    worst, why = 0.0, None
    for i, (out, exact) in enumerate(zip(outputs, ref, strict=False)):
        err = rel_l2(out, exact)
        worst = max(worst, err)
        if not err <= rel_l2_bound(out.dtype):
            why = f"output {i}: rel_l2 {err:.3g} over the bound {rel_l2_bound(out.dtype):.3g}"
    return worst, why
