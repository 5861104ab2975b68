"""What is timed: oink, the PyTorch baselines, and the optional kernel libraries when importable.

Every rmsnorm provider is `fn(x, w, eps) -> y` (a new tensor in x's dtype); every fused provider
is `fn(x, residual, w, eps) -> None` with vLLM's in-place semantics (residual <- x + residual
rounded to the dtype, x <- rmsnorm(residual)), so that all of them move the same bytes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

RMSNORM = "rmsnorm"
FUSED = "fused_add_rms_norm"
OPS = (RMSNORM, FUSED)

# F.rms_norm warns once per call site when x and weight dtypes differ (it then runs its composite).
warnings.filterwarnings("ignore", message="Mismatch dtype between input and weight")


@dataclass(frozen=True)
class Provider:
    name: str
    op: str
    fn: Callable
    baseline: bool = True  # oink is the one provider that is not a baseline
    cuda_only: bool = False
    same_weight_dtype: bool = False  # needs the weight in x's dtype

    def unsupported(self, device: str, dtype: torch.dtype, wdtype: torch.dtype) -> str | None:
        if self.cuda_only and device != "cuda":
            return "CUDA only"
        if self.same_weight_dtype and wdtype != dtype:
            return "needs the weight in x's dtype"
        return None


def first_line(e: BaseException, limit: int = 300) -> str:
    """`Type: first line of the message`, cut at `limit` characters."""
    lines = str(e).splitlines()
    return f"{type(e).__name__}: {lines[0][:limit] if lines else ''}"


# --- the float32 composite (what vLLM's RMSNorm.forward_native and the baselines run) ----------


def composite_rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x.float(), pow(2).mean(-1), rsqrt, multiply, cast, * w. With a float32 weight the product
    is cast back to x's dtype, so that every provider returns the same dtype and bytes."""
    dtype = x.dtype
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(dtype) * w
    return y if y.dtype == dtype else y.to(dtype)


def composite_fused(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float) -> None:
    """Add then normalize, in place: residual += x (one rounding), x <- rmsnorm(residual)."""
    residual.add_(x)
    x.copy_(composite_rmsnorm(residual, w, eps))


def _f_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def _compiled(fn: Callable) -> Callable:
    """torch.compile(dynamic=True), as vLLM runs its default path; compiled at the first call."""
    config = torch._dynamo.config
    # One run sees several shapes, strides and the 0/1 specialisation of M: never fall back to
    # eager silently because a recompile limit was hit.
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), 64))
    return torch.compile(fn, dynamic=True)


# --- optional libraries -----------------------------------------------------------------------


def _vllm() -> tuple[list[Provider], str]:
    import vllm  # noqa: F401
    import vllm._C  # noqa: F401  (registers torch.ops._C)

    ops = torch.ops._C
    ops.rms_norm, ops.fused_add_rms_norm  # noqa: B018  (AttributeError if this build lacks them)

    def rms(x, w, eps):
        out = torch.empty_like(x)  # vLLM's RMSNorm.forward_cuda allocates its output the same way
        ops.rms_norm(out, x, w, eps)
        return out

    def fused(x, residual, w, eps):
        ops.fused_add_rms_norm(x, residual, w, eps)

    kw = {"cuda_only": True, "same_weight_dtype": True}
    providers = [
        Provider("vllm_cuda", RMSNORM, rms, **kw),
        Provider("vllm_cuda", FUSED, fused, **kw),
    ]
    return providers, getattr(vllm, "__version__", "unknown version")


def _flashinfer() -> tuple[list[Provider], str]:
    import flashinfer
    import flashinfer.norm as norm

    def rms(x, w, eps):
        return norm.rmsnorm(x, w, eps)

    def fused(x, residual, w, eps):
        norm.fused_add_rmsnorm(x, residual, w, eps)

    kw = {"cuda_only": True, "same_weight_dtype": True}
    providers = [
        Provider("flashinfer", RMSNORM, rms, **kw),
        Provider("flashinfer", FUSED, fused, **kw),
    ]
    return providers, getattr(flashinfer, "__version__", "unknown version")


def _quack() -> tuple[list[Provider], str]:
    import quack

    fn = quack.rmsnorm
    fn = getattr(fn, "rmsnorm", fn)  # quack.rmsnorm may be the module or the function
    if not callable(fn):
        raise ImportError("quack.rmsnorm is not callable")

    def rms(x, w, eps):
        return fn(x, w, eps=eps)

    providers = [Provider("quack", RMSNORM, rms, cuda_only=True)]
    return providers, getattr(quack, "__version__", "unknown version")


OPTIONAL = {"vllm_cuda": _vllm, "flashinfer": _flashinfer, "quack": _quack}

# What each provider runs, for the reports.
DESCRIPTIONS = {
    "oink": "oink.rmsnorm / oink.fused_add_rms_norm (defaults: PDL on sm_90+)",
    "oink_no_pdl": "oink with oink.set_pdl(False): each launch waits for the previous kernel, "
    "as the baselines do (compare with the baselines on equal terms)",
    "torch_eager": "float32 composite in eager PyTorch (x.float(), pow(2).mean(-1), rsqrt, "
    "multiply, cast, * w); fused: residual.add_(x), then x.copy_(composite(residual))",
    "F.rms_norm": "torch.nn.functional.rms_norm (rmsnorm only)",
    "inductor": "torch.compile(dynamic=True) of the same composites (in place for the fused op)",
    "vllm_cuda": "torch.ops._C.rms_norm(out, x, w, eps) / fused_add_rms_norm(x, residual, w, eps)",
    "flashinfer": "flashinfer.norm.rmsnorm / fused_add_rmsnorm",
    "quack": "quack.rmsnorm (rmsnorm only)",
}
CORE = ("oink", "oink_no_pdl", "torch_eager", "F.rms_norm", "inductor")
ALL_NAMES = CORE + tuple(OPTIONAL)


def build(device: str, requested: list[str] | None) -> tuple[dict[str, list[Provider]], dict]:
    """Providers per op, and what was found of the optional ones ({name: version or reason}).

    Default: everything available; in CPU mode inductor only when asked for (a compile takes
    longer than the whole --quick run should), and the CUDA-only providers never."""
    import oink  # here, not at the top: `--help` must work without the extension

    unknown = sorted(set(requested or ()) - set(ALL_NAMES))
    if unknown:
        raise ValueError(f"unknown provider(s) {unknown}; expected some of {', '.join(ALL_NAMES)}")
    if requested:
        wanted = set(requested)
    else:
        # No PDL on the CPU: nothing to compare oink_no_pdl against there.
        wanted = set(ALL_NAMES) - ({"inductor", "oink_no_pdl"} if device == "cpu" else set())
    wanted.add("oink")  # every ratio is oink's: it is always measured

    def without_pdl(fn: Callable) -> Callable:
        def call(*args):
            previous = oink.set_pdl(False)  # read when the call is planned (and captured)
            try:
                return fn(*args)
            finally:
                oink.set_pdl(previous)

        return call

    no_pdl = {"baseline": False, "cuda_only": True}
    providers = [
        Provider("oink", RMSNORM, oink.rmsnorm, baseline=False),
        Provider("oink", FUSED, oink.fused_add_rms_norm, baseline=False),
        Provider("oink_no_pdl", RMSNORM, without_pdl(oink.rmsnorm), **no_pdl),
        Provider("oink_no_pdl", FUSED, without_pdl(oink.fused_add_rms_norm), **no_pdl),
        Provider("torch_eager", RMSNORM, composite_rmsnorm),
        Provider("torch_eager", FUSED, composite_fused),
        Provider("F.rms_norm", RMSNORM, _f_rms_norm),
    ]
    if "inductor" in wanted:
        providers += [
            Provider("inductor", RMSNORM, _compiled(composite_rmsnorm)),
            Provider("inductor", FUSED, _compiled(composite_fused)),
        ]
    found: dict[str, str] = {}
    for name, loader in OPTIONAL.items():
        if name not in wanted:
            continue
        if device != "cuda":
            found[name] = "not tried: CUDA only"
            continue
        try:
            extra, version = loader()
        except Exception as e:  # any failure to import means "not available", never fatal
            found[name] = f"not importable: {first_line(e)}"
            continue
        found[name] = version
        providers += extra
    by_op = {op: [p for p in providers if p.op == op and p.name in wanted] for op in OPS}
    return by_op, found
