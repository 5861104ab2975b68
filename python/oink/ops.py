"""Typed wrappers around torch.ops.oink.* and the `explain` facility."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


def rmsnorm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """``x * rsqrt(mean(x**2, -1) + eps) * weight`` in float32, rounded once to x's dtype.

    x: float16/bfloat16/float32, last dimension contiguous; rows may be padded (stride(-2) > N).
    weight: None or a contiguous [N] tensor of x's dtype or float32.
    Returns a new tensor with x's shape and strides.
    """
    return torch.ops.oink.rmsnorm.default(x, weight, eps)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> None:
    """In place, vLLM semantics: ``residual += x`` (rounded to the dtype), then
    ``x = rmsnorm(residual, weight, eps)``. x and residual must not share memory."""
    torch.ops.oink.fused_add_rms_norm.default(x, residual, weight, eps)


@dataclass(frozen=True)
class Plan:
    """The launch plan oink would use for a call: a pure function of the device capability,
    dtypes, N, M, strides and alignment (never of environment variables)."""

    op: str
    variant: str  # row_in_registers | streamed | two_pass | cpu
    device: str  # sm_90, sm_100, ... or cpu
    x_dtype: str
    weight_dtype: str
    M: int
    N: int
    ld_x: int
    chunk_elems: int  # elements of x per 16-byte chunk: the unit a thread owns
    vector_io: bool  # chunks move as 16-byte vectors
    threads_per_row: int
    chunks_per_thread: int  # registers (row_in_registers) or shared-memory slots (streamed)
    rows_per_cta: int
    block_threads: int
    grid: int
    pdl: bool
    stages: int = 0  # streamed: row groups in flight per CTA
    smem_bytes: int = 0  # streamed: dynamic shared memory per CTA
    ld_residual: int | None = None

    @classmethod
    def parse(cls, text: str) -> Plan:
        raw = dict(item.split("=", 1) for item in text.split())
        kwargs = {}
        for f in fields(cls):
            if f.name not in raw:
                continue
            value = raw[f.name]
            if f.name in ("vector_io", "pdl"):
                kwargs[f.name] = value == "1"
            elif f.name in ("op", "variant", "device", "x_dtype", "weight_dtype"):
                kwargs[f.name] = value
            else:
                kwargs[f.name] = int(value)
        return cls(**kwargs)

    def __str__(self) -> str:
        io = "16-byte vectors" if self.vector_io else "element by element (unaligned or odd N)"
        lines = [
            f"oink {self.op} on {self.device}: {self.variant}",
            f"  x {self.x_dtype}, weight {self.weight_dtype}, M={self.M}, N={self.N}, "
            f"row stride {self.ld_x}",
        ]
        if self.variant == "streamed":
            lines += [
                f"  persistent: {self.stages} row groups in flight per CTA through shared memory "
                f"({self.smem_bytes} bytes per CTA)"
            ]
        if self.variant != "cpu":
            lines += [
                f"  grid {self.grid} CTAs x {self.block_threads} threads "
                f"({self.rows_per_cta} row(s) per CTA, {self.threads_per_row} threads per row)",
                f"  each thread owns {self.chunks_per_thread or 'a strided run of'} chunk(s) of "
                f"{self.chunk_elems} elements; I/O: {io}; PDL {'on' if self.pdl else 'off'}",
            ]
        return "\n".join(lines)


def set_pdl(enabled: bool) -> bool:
    """Whether later CUDA launches may use programmatic dependent launch (sm_90+; on by default):
    each kernel waits for the preceding one in the stream before touching memory, and lets the
    next one launch early. Process-wide, read when a call is planned (so a CUDA graph keeps the
    setting it was captured with). Returns the previous setting."""
    return bool(torch.ops.oink.set_pdl.default(bool(enabled)))


def explain(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    op: str = "rmsnorm",
    residual: torch.Tensor | None = None,
    eps: float = 1e-6,
) -> Plan:
    """The plan a call of `op` ("rmsnorm" or "fused_add_rms_norm") with these arguments would use.
    For the fused op without `residual`, a residual laid out like x is assumed."""
    if op == "fused_add_rms_norm" and residual is None:
        residual = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    return Plan.parse(torch.ops.oink.explain.default(op, x, weight, residual, eps))
