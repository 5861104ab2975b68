"""How often different rounding orders of RMSNorm disagree, emulated in PyTorch on the CPU.

`python tools/rounding_orders.py [--rows 256] [--n 4096] [--seed 0]` prints, for bfloat16 and
float16, the fraction of output elements where each peer's order of operations gives other bits
than oink's, and the largest difference in units in the last place (ulp) of the output dtype.
The numbers in docs/numerics.md come from this script. Every order shares one inverse RMS per
row (float64, rounded to float32), so only the rounding steps differ:

* rmsnorm, oink:         round(x * rstd * w)                      one rounding
* rmsnorm, vLLM:         round(round(x * rstd) * w)               vllm_c kernel and native op
* fused, oink (vllm_c):  h = round(x + r); normalise h            the rounded residual
* fused, FlashInfer:     h = x + r in float32; normalise h        the unrounded sum, one rounding
* fused, vLLM native:    the unrounded sum, then vLLM's two roundings

x, r ~ N(0, 1) rounded to the dtype; weights w ~ N(1, 0.5^2) (near one, like trained RMSNorm
weights) and w ~ N(0, 1), rounded to the dtype. Imports nothing of oink."""

from __future__ import annotations

import argparse

import torch


def inv_rms(h: torch.Tensor, eps: float, rel_error: float = 0.0) -> torch.Tensor:
    """1/sqrt(mean(h^2) + eps) per row, computed in float64 and rounded to float32 once, then
    off by `rel_error` (to model an approximate rsqrt)."""
    hd = h.double()
    return (torch.rsqrt(hd.pow(2).mean(-1, keepdim=True) + eps) * (1 + rel_error)).float()


def one_rounding(h, w, dtype, eps, rel_error=0.0):
    """round(h * rstd * w): float32 products, one rounding to the dtype."""
    return (h * inv_rms(h, eps, rel_error) * w.float()).to(dtype)


def two_roundings(h, w, dtype, eps):
    """round(round(h * rstd) * w): (h * rstd) rounded to the dtype, then times the weight in the
    dtype (PyTorch and CUDA form a 16-bit product exactly in float32 and round it once)."""
    return ((h * inv_rms(h, eps)).to(dtype).float() * w.float()).to(dtype)


def ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in ulp of the (16-bit) dtype; a sign change counts as a huge difference."""
    d = (a.view(torch.int16).int() - b.view(torch.int16).int()).abs()
    same_sign = torch.sign(a.float()) == torch.sign(b.float())
    return torch.where(same_sign | (d == 0), d, torch.full_like(d, 1 << 30))


def compare(name: str, ours: torch.Tensor, theirs: torch.Tensor) -> str:
    d = ulps(ours, theirs)
    differ, over_one = (d != 0).double().mean().item(), int((d > 1).sum())
    return (
        f"  {name:40} differ {differ:7.3%}; by 2+ ulp: {over_one:5d} of {d.numel()} "
        f"(max {int(d.max())} ulp)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/rounding_orders.py", description=__doc__)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eps", type=float, default=1e-6)
    args = ap.parse_args(argv)
    g = torch.Generator().manual_seed(args.seed)
    shape = (args.rows, args.n)
    print(f"{args.rows} rows x N={args.n}, seed {args.seed}")
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(shape, generator=g).to(dtype)
        r = torch.randn(shape, generator=g).to(dtype)
        weights = {
            "w ~ N(1, 0.5^2)": (1 + 0.5 * torch.randn(args.n, generator=g)).to(dtype),
            "w ~ N(0, 1)": torch.randn(args.n, generator=g).to(dtype),
        }
        h_rounded = (x.float() + r.float()).to(dtype).float()
        h_exact = x.float() + r.float()
        for wname, w in weights.items():
            print(f"{str(dtype)[6:]}, {wname}:")
            eps = args.eps
            ours = one_rounding(x.float(), w, dtype, eps)
            fused = one_rounding(h_rounded, w, dtype, eps)
            rows = [
                ("rmsnorm: vLLM, two roundings", ours, two_roundings(x.float(), w, dtype, eps)),
                ("rmsnorm: one rounding, rstd x (1+2^-22)", ours,
                 one_rounding(x.float(), w, dtype, eps, 2**-22)),
                ("fused: vllm_c, rounded h, two roundings", fused,
                 two_roundings(h_rounded, w, dtype, eps)),
                ("fused: FlashInfer, unrounded h", fused, one_rounding(h_exact, w, dtype, eps)),
                ("fused: vLLM native, unrounded h, two", fused,
                 two_roundings(h_exact, w, dtype, eps)),
            ]  # fmt: skip
            for name, a, b in rows:
                print(compare(name, a, b))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
