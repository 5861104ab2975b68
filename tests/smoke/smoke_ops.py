"""Smoke test of an installed oink-kernels wheel: needs only torch and the wheel (no pytest).

    python tests/smoke/smoke_ops.py      # exits non-zero on the first failure

tools/test.sh runs it in fresh virtual environments with the oldest torch the stable ABI targets
and the newest torch release, to show that one wheel serves both. Both ops run on the CPU (and on
CUDA when a GPU is present) against a float64 reference computed here, with a weight and without.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import torch

import oink

EPS = 1e-6
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# (shape, row stride or None for contiguous rows)
SHAPES = (((1, 7), None), ((17, 1024), None), ((5, 4096), 4160), ((2, 3, 500), None))


def ulp(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps


def make(shape, row_stride, dtype, device, gen):
    """Random input; with row_stride, rows are a slice of a wider buffer (padded rows)."""
    if row_stride is None:
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype).to(device)
    wide = torch.randn((*shape[:-1], row_stride), generator=gen, dtype=torch.float32)
    return wide.to(dtype).to(device)[..., : shape[-1]]


def reference(x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    x64 = x.double()
    y = x64 * torch.rsqrt(x64.square().mean(-1, keepdim=True) + EPS)
    if weight is not None:
        y = y * weight.double()
    return y


def check_close(name: str, got: torch.Tensor, ref64: torch.Tensor, dtype: torch.dtype) -> None:
    # One rounding to the output dtype, after float32 math: within 1 ulp of the float64 value.
    err = (got.double() - ref64).abs()
    bound = ulp(dtype) * ref64.abs() + 32 * torch.finfo(torch.float32).eps * (1 + ref64.abs())
    bad = int((err > bound).sum())
    if bad or not torch.isfinite(got).all():
        raise AssertionError(f"{name}: {bad} elements off the float64 reference ({err.max()})")


def weights(n, dtype, device, gen):
    yield None
    yield torch.randn(n, generator=gen).to(dtype).to(device)
    if dtype != torch.float32:
        yield torch.randn(n, generator=gen).to(device)  # float32 weight with 16-bit x


def fused_weight_optional() -> bool:
    schema = torch.ops.oink.fused_add_rms_norm.default._schema
    return isinstance(schema.arguments[2].type, torch.OptionalType)


def run(device: str) -> int:
    gen = torch.Generator().manual_seed(0)
    fused_none = fused_weight_optional()
    checks = 0
    for dtype in DTYPES:
        for shape, row_stride in SHAPES:
            n = shape[-1]
            for w in weights(n, dtype, device, gen):
                wname = "none" if w is None else str(w.dtype).removeprefix("torch.")
                name = f"{device} {str(dtype).removeprefix('torch.')} {shape} weight={wname}"

                x = make(shape, row_stride, dtype, device, gen)
                x_before = x.clone()
                y = oink.rmsnorm(x, w, EPS)
                assert y.shape == x.shape and y.dtype == dtype, f"rmsnorm {name}: {y.shape}"
                assert torch.equal(x, x_before), f"rmsnorm {name}: input changed"
                check_close(f"rmsnorm {name}", y, reference(x, w), dtype)
                checks += 1

                if w is None and not fused_none:
                    continue  # this build's fused op requires a weight
                x = make(shape, row_stride, dtype, device, gen)
                residual = make(shape, None, dtype, device, gen)
                x_in, residual_in = x.clone(), residual.clone()
                oink.fused_add_rms_norm(x, residual, w, EPS)
                sum64 = x_in.double() + residual_in.double()
                check_close(f"fused residual {name}", residual, sum64, dtype)
                check_close(f"fused x {name}", x, reference(residual, w), dtype)
                # The contract: x is bitwise oink.rmsnorm of the rounded residual it stored.
                assert torch.equal(x, oink.rmsnorm(residual, w, EPS)), f"fused {name}: not bitwise"
                checks += 1
    return checks


def main() -> int:
    installed = importlib.metadata.version("oink-kernels")
    print(
        f"python {sys.version.split()[0]}, torch {torch.__version__}, "
        f"oink {oink.__version__} ({installed} installed) from {Path(oink.__file__).parent}"
    )
    version, _, flavour = installed.partition("+")
    assert oink.__version__ == version, f"oink.__version__ {oink.__version__} != {installed}"
    # The local version says what the wheel holds: +cuXYZ CUDA kernels, +cpu none.
    assert flavour.startswith("cu") == bool(oink.cuda_targets()), (installed, oink.cuda_targets())
    assert Path(oink.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()), (
        "oink was not imported from this environment's installed wheel"
    )
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        print(f"{device}: {run(device)} checks passed")
    print("smoke test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
