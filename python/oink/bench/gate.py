"""Correctness gate before timing: a provider's output against the float64 reference of
oink.testing (GUIDE §2), row chunk by row chunk so that M = 512K rows never needs a float64 copy of
the whole tensor. A provider that fails is recorded with its statistics and not timed."""

from __future__ import annotations

import math

import torch

from oink.testing import fused_add_reference, rmsnorm_reference, unit_roundoff

# Elements per chunk of the float64 comparison (64 MiB of float64 per temporary).
_CHUNK_ELEMS = 1 << 23


def rel_l2_bound(dtype: torch.dtype) -> float:
    """Largest ||y - ref|| / ||ref|| a correct implementation may show.

    16-bit outputs: the final rounding alone gives about 0.6 u (u = unit roundoff) and the
    composite's second rounding (cast, then * weight) about as much again, so 4 u has a factor of
    ~3 to spare and still catches any real bug (a wrong row, a missed element, a wrong eps).
    float32: the float32 sum of squares over N up to 262144 errs by ~log2(N) u, so 1e-5."""
    return max(4 * unit_roundoff(dtype), 1e-5)


class _Stats:
    """Streaming max |d|, max |d|/|ref|, sum d^2, sum ref^2 and non-finite count."""

    def __init__(self) -> None:
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.sq_diff = 0.0
        self.sq_ref = 0.0
        self.nonfinite = 0

    def add(self, y: torch.Tensor, ref: torch.Tensor) -> None:
        self.nonfinite += int((~torch.isfinite(y)).sum().item())
        diff = (y.double() - ref).abs()
        if diff.numel() == 0:
            return
        denom = ref.abs().clamp_min(torch.finfo(torch.float32).tiny)
        # max() propagates NaN, so a NaN output makes every statistic NaN.
        self.max_abs = _nanmax(self.max_abs, diff.max().item())
        self.max_rel = _nanmax(self.max_rel, (diff / denom).max().item())
        self.sq_diff += diff.pow(2).sum().item()
        self.sq_ref += ref.pow(2).sum().item()

    def result(self, bound: float) -> dict:
        rel_l2 = (
            math.sqrt(self.sq_diff / self.sq_ref) if self.sq_ref > 0 else math.sqrt(self.sq_diff)
        )
        return {
            "max_abs": self.max_abs,
            "max_rel": self.max_rel,
            "rel_l2": rel_l2,
            "nonfinite": self.nonfinite,
            "bound": bound,
        }


def _nanmax(a: float, b: float) -> float:
    return float("nan") if math.isnan(a) or math.isnan(b) else max(a, b)


def _row_chunks(m: int, n: int):
    rows = max(1, _CHUNK_ELEMS // max(n, 1))
    for start in range(0, m, rows):
        yield slice(start, min(m, start + rows))


def passed(stats: dict) -> bool:
    """NaN fails too: `not (nan <= bound)`."""
    ok = stats["nonfinite"] == 0 and stats["rel_l2"] <= stats["bound"]
    res = stats.get("residual")
    if res is not None:
        ok = ok and res["nonfinite"] == 0 and res["rel_l2"] <= res["bound"]
    return bool(ok)


def why_failed(stats: dict) -> str | None:
    """None if the statistics pass; otherwise what failed, with the numbers."""
    if passed(stats):
        return None
    parts = []
    for what, s in (("output", stats), ("new residual", stats.get("residual"))):
        if s is None:
            continue
        if s["nonfinite"]:
            parts.append(f"{what}: {s['nonfinite']} non-finite values")
        elif not s["rel_l2"] <= s["bound"]:
            parts.append(f"{what}: rel_l2 {s['rel_l2']:.3g} over the bound {s['bound']:.3g}")
    return "correctness gate against float64: " + "; ".join(parts)


def check_rmsnorm(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor | None, eps: float) -> dict:
    """Statistics of y = rmsnorm(x, w, eps) against float64; `out_dtype` notes a promoted result."""
    if y.shape != x.shape:
        raise ValueError(f"output shape {tuple(y.shape)} differs from x's {tuple(x.shape)}")
    stats = _Stats()
    m, n = x.shape
    for rows in _row_chunks(m, n):
        stats.add(y[rows], rmsnorm_reference(x[rows], w, eps))
    out = stats.result(rel_l2_bound(x.dtype))
    out["out_dtype"] = str(y.dtype).replace("torch.", "")
    return out


def check_fused(
    x_after: torch.Tensor,
    residual_after: torch.Tensor,
    x_before: torch.Tensor,
    residual_before: torch.Tensor,
    w: torch.Tensor,
    eps: float,
) -> dict:
    """Statistics of the in-place fused op: x against float64 rmsnorm of the rounded new residual,
    and (under "residual") the new residual against x + residual rounded once to the dtype."""
    stats, res_stats = _Stats(), _Stats()
    m, n = x_before.shape
    for rows in _row_chunks(m, n):
        new_res, ref = fused_add_reference(x_before[rows], residual_before[rows], w, eps)
        stats.add(x_after[rows], ref)
        res_stats.add(residual_after[rows], new_res.double())
    bound = rel_l2_bound(x_before.dtype)
    out = stats.result(bound)
    out["residual"] = res_stats.result(bound)
    out["out_dtype"] = str(x_after.dtype).replace("torch.", "")
    return out
