"""Shapes, float64 references and poison helpers shared by the tests and tools/sanitize_cases.py
(the sweep of docs/contract.md, 'How correctness is measured').

Nothing here is a test: it asserts nothing and prints nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# The contract's sweep.
SHAPES_N = [1, 7, 64, 111, 128, 500, 1024, 1536, 3072, 4096, 5120, 6144, 7168, 8192, 12288,
            16384, 32768, 65536, 131072]  # fmt: skip
SHAPES_M = [0, 1, 2, 3, 17, 255, 256, 4097]

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
# (x dtype, weight dtype or None for no weight): every supported combination.
DTYPE_COMBOS = [(dt, wdt) for dt in DTYPES for wdt in (None, dt, torch.float32)]
DTYPE_COMBOS = list(dict.fromkeys(DTYPE_COMBOS))  # float32 x: "same" and float32 coincide

# Poison values: NaN for floats, so an unwritten output element can never pass a comparison.
POISON = float("nan")


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the distance from 1.0 to the next representable number."""
    return torch.finfo(dtype).eps / 2


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """float64 RMSNorm of the values of x (any device), unrounded."""
    xd = x.double()
    y = xd * torch.rsqrt(xd.pow(2).mean(dim=-1, keepdim=True) + eps)
    return y * weight.double() if weight is not None else y


def fused_add_reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(new residual rounded to the dtype, float64 normalised output) under vLLM semantics."""
    new_residual = (x.float() + residual.float()).to(x.dtype)
    return new_residual, rmsnorm_reference(new_residual, weight, eps)


@dataclass
class ErrorStats:
    max_abs: float
    max_rel: float
    rel_l2: float  # ||y - ref|| / ||ref||

    def as_dict(self) -> dict:
        return {"max_abs": self.max_abs, "max_rel": self.max_rel, "rel_l2": self.rel_l2}


def error_stats(y: torch.Tensor, ref: torch.Tensor) -> ErrorStats:
    diff = (y.double() - ref).abs()
    denom = ref.abs().clamp_min(torch.finfo(torch.float32).tiny)
    ref_norm = ref.norm().item()
    return ErrorStats(
        max_abs=diff.max().item() if diff.numel() else 0.0,
        max_rel=(diff / denom).max().item() if diff.numel() else 0.0,
        rel_l2=diff.norm().item() / ref_norm if ref_norm > 0 else diff.norm().item(),
    )


def padded_rows(
    m: int,
    n: int,
    dtype: torch.dtype,
    device,
    pad: int = 0,
    offset: int = 0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """An [m, n] view of random values with row stride n + pad, starting `offset` elements into
    its buffer (offset 1 gives a base pointer that is not 16-byte aligned). The padding and the
    offset hold POISON, so a kernel that touches them is caught by `untouched`."""
    ld = n + pad
    buffer = torch.full((offset + max(m, 1) * ld,), POISON, dtype=dtype, device=device)
    view = buffer[offset : offset + m * ld].view(m, ld)[:, :n] if m else buffer[:0].view(0, n)
    view.copy_(torch.randn(m, n, generator=generator).to(dtype))
    return view


def untouched_padding(view: torch.Tensor) -> bool:
    """True if every element of the view's storage outside the view is still POISON (NaN)."""
    storage = torch.empty(0, dtype=view.dtype, device=view.device)
    storage.set_(
        view.untyped_storage(), 0, (view.untyped_storage().nbytes() // view.element_size(),)
    )
    mask = torch.ones_like(storage, dtype=torch.bool)
    if view.numel():
        inside = torch.as_strided(mask, view.shape, view.stride(), view.storage_offset())
        inside.fill_(False)
    return bool(storage[mask].isnan().all())


def ulp(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One unit in the last place of `dtype` at the magnitude of each float64 value (at least the
    dtype's smallest subnormal step)."""
    finfo = torch.finfo(dtype)
    mag = values.double().abs().clamp_min(finfo.tiny)
    return torch.pow(2.0, torch.floor(torch.log2(mag)) - mantissa_bits(dtype))


def mantissa_bits(dtype: torch.dtype) -> int:
    return {torch.float16: 10, torch.bfloat16: 7, torch.float32: 23}[dtype]


def schedule_test_rows(n: int, dtype: torch.dtype) -> int:
    """Rows enough that an aligned [M, n] rmsnorm batch on this GPU takes its batch schedule:
    the tile, or the streamed one (a float32 weight on 16-bit rows of 64-127 lanes, too few for
    the tile; the fused op keeps registers there at any size): twice as many row groups as 2048
    threads per SM would hold, at least 4 per persistent CTA (the planner streams from 3 on, with
    at most 1024 of its threads per SM), computed from the row's thread layout like the
    planner's."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    chunks = -(-n // (16 // dtype.itemsize))
    threads_per_row = min(1024, 1 << max(0, (-(-chunks // 2) - 1).bit_length()))
    rows_per_cta = max(1, 128 // threads_per_row)
    block = threads_per_row * rows_per_cta
    return 2 * sms * min(32, 2048 // block) * rows_per_cta + 3
