"""Float64 references of every benchmarked pass and the correctness gate that runs before any
timing. References are computed a block of rows at a time so that the largest batches (512K
rows) never need their whole float64 copy; the losses (means over the rows) in one block, on the
first GATE_ROWS rows."""

from __future__ import annotations

import torch

EPS = 1e-6
BLOCK_ELEMENTS = 1 << 26  # float64 elements per block of rows
LOSSES = ("cross_entropy", "linear_cross_entropy")
GATE_ROWS = 1024  # the losses' gate runs on this many rows (their reference has no row blocks)


def unit_roundoff(dtype: torch.dtype) -> float:
    return {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}[dtype]


def rel_l2_bound(dtype: torch.dtype, floor: torch.dtype = torch.float32) -> float:
    """The gate: 4 units of roundoff for 16-bit outputs; float32 at 1e-5 (reduction order); at
    least floor's (linear_cross_entropy: x's dtype, the logits' precision outside a fused op)."""
    return max(1e-5 if d == torch.float32 else 4 * unit_roundoff(d) for d in (dtype, floor))


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
    if case == "softmax forward":
        return (torch.softmax(t[0], -1),)
    if case == "softmax backward":
        dy, y = t
        return (y * (dy - (dy * y).sum(-1, keepdim=True)),)
    if case in LOSSES:  # the mean over the rows and its gradients
        x, target, *w = t
        z = x @ w[0].T if w else x
        dz = torch.softmax(z, -1).scatter_add_(-1, target[:, None], z.new_full((len(x), 1), -1.0))
        dz /= len(x)
        loss = (z.logsumexp(-1) - z.gather(-1, target[:, None])[:, 0]).mean()
        return (loss, dz @ w[0], dz.T @ x) if w else (loss, dz)
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
    (m, n), sums = inputs[0].shape, COLUMN_SUMS.get(case, set())
    as64 = [p.double() for p in params]
    if case in LOSSES:  # the target: int64
        return _block(case, [t.double() if t.is_floating_point() else t for t in inputs] + as64)
    outs: list = []
    step = max(1, BLOCK_ELEMENTS // max(n, 1))
    for start in range(0, max(m, 1), step):
        block = _block(case, [t[start : start + step].double() for t in inputs] + as64)
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


def gate(outputs: tuple, ref: tuple, floor=torch.float32) -> tuple[float, str | None]:
    """(worst rel_l2 over the outputs a provider returned, None if all pass or why not). A
    provider may return fewer outputs than the reference (an inference kernel: y only)."""
    worst, why = 0.0, None
    for i, (out, exact) in enumerate(zip(outputs, ref, strict=False)):
        err, bound = rel_l2(out, exact), rel_l2_bound(out.dtype, floor)
        worst = max(worst, err)
        if not err <= bound:
            why = f"output {i}: rel_l2 {err:.3g} over the bound {bound:.3g}"
    return worst, why
